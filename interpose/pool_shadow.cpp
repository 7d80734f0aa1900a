// interpose/pool_shadow.cpp — see pool_shadow.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
#include "pool_shadow.h"

namespace coloc::interpose {

namespace {

uint64_t sub_floor(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

void PoolShadow::set_chunk(uint64_t chunk) {
  if (chunk != 0 && (chunk & (chunk - 1)) == 0) chunk_ = chunk;
}

uint64_t PoolShadow::need(uint64_t bytes) const {
  const uint64_t mask = chunk_ - 1;
  if (bytes > UINT64_MAX - mask) return UINT64_MAX & ~mask;
  return (bytes + mask) & ~mask;
}

PoolShadow::Ticket PoolShadow::begin(uint64_t bytes, uint64_t stream) {
  Ticket t;
  t.need = need(bytes);
  t.spare_before = spare();
  int best = -1;
  for (int i = 0; i < n_; ++i)
    if ((pieces_[i].stream == kAllStreams || pieces_[i].stream == stream) && pieces_[i].bytes >= t.need &&
        (best < 0 || pieces_[i].bytes < pieces_[best].bytes))
      best = i;
  if (best >= 0) {
    t.piece = pieces_[best].bytes;
    t.piece_stream = pieces_[best].stream;
    t.piece_ctx = pieces_[best].ctx;
    t.piece_seq = pieces_[best].seq;
    drop_piece(best);
    slack_ += t.piece - t.need;  // the piece's excess stays reserved, shape unknown
  } else {
    t.growth = t.need;
  }
  held_ += t.need;
  return t;
}

void PoolShadow::abort(const Ticket& t) {
  held_ = sub_floor(held_, t.need);
  if (t.piece) {
    slack_ = sub_floor(slack_, t.piece - t.need);
    add_piece(t.piece, t.piece_stream, t.piece_ctx, t.piece_seq);
  }
}

void PoolShadow::freed(uint64_t bytes, const FreeSite& site) {
  uint64_t n = need(bytes);
  if (n > held_) n = held_;
  held_ -= n;
  add_piece(n, site.stream == kAllStreams ? kAllStreams - 1 : site.stream, site.ctx, site.seq);
}

void PoolShadow::synchronized(uint64_t stream, uint64_t ctx, uint64_t seq) {
  for (int i = 0; i < n_; ++i) {
    Piece& p = pieces_[i];
    if (p.stream == kAllStreams || p.seq >= seq) continue;  // ready already, or freed after it began
    if (stream == kAllStreams ? p.ctx == ctx : p.stream == stream) p.stream = kAllStreams;
  }
}

uint64_t PoolShadow::reconcile(uint64_t reserved, bool may_lower) {
  const uint64_t c = charge();
  if (reserved > c) {
    slack_ += reserved - c;
    return reserved - c;
  }
  if (!may_lower || reserved == c) return 0;
  // Less is reserved than charged: a trim gave blocks back, or the driver reused a block the shadow
  // did not know was reusable. Which blocks went is not known (slack may be free blocks too), so no
  // piece can be trusted any more: what the reading still shows beyond the live blocks stays
  // charged, as slack.
  uint64_t give = c - reserved;
  uint64_t spare = slack_ + pieces_bytes_;
  slack_ = spare > give ? spare - give : 0;
  n_ = 0;
  pieces_bytes_ = 0;
  return 0;  // a reading below the live blocks leaves them charged in full regardless
}

void PoolShadow::destroyed() {
  n_ = 0;
  pieces_bytes_ = 0;
  slack_ = 0;
}

uint64_t PoolShadow::ready_bytes() const {
  uint64_t sum = 0;
  for (int i = 0; i < n_; ++i)
    if (pieces_[i].stream == kAllStreams) sum += pieces_[i].bytes;
  return sum;
}

void PoolShadow::add_piece(uint64_t bytes, uint64_t stream, uint64_t ctx, uint64_t seq) {
  if (bytes == 0) return;
  if (n_ == kMaxPieces) {
    // Keep the larger pieces (the ones worth reusing): fold the smallest into slack.
    int smallest = 0;
    for (int i = 1; i < n_; ++i)
      if (pieces_[i].bytes < pieces_[smallest].bytes) smallest = i;
    if (pieces_[smallest].bytes >= bytes) {
      slack_ += bytes;
      return;
    }
    slack_ += pieces_[smallest].bytes;
    drop_piece(smallest);
  }
  pieces_[n_++] = Piece{bytes, stream, ctx, seq};
  pieces_bytes_ += bytes;
}

void PoolShadow::drop_piece(int i) {
  pieces_bytes_ -= pieces_[i].bytes;
  pieces_[i] = pieces_[--n_];
}

}  // namespace coloc::interpose
