// interpose/pool_shadow.h — a shadow of one memory pool's reserved memory, kept without asking the
// driver, so that a stream-ordered allocation is charged what it may add to the device *before*
// the driver call, and the limit is never passed.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// The model (bytes throughout). A pool reserves device memory in pieces of at least its chunk (the
// device's allocation granularity, 2 MiB on current GPUs: cuMemGetAllocationGranularity); an
// allocation of `b` bytes occupies need(b) = round_up(b, chunk) of it. The shadow keeps
//   held     need() of every live block (and of every allocation in flight),
//   pieces   the blocks freed since, each a piece of reserve the pool may hand out again: *pending*
//            from cuMemFreeAsync until a synchronize shows the free has run (until then only the
//            stream it was freed on can reuse it), then *ready* (any stream can),
//   slack    reserve that is charged but whose shape is unknown (a taken piece's excess, pieces
//            that did not fit the table, what a reading showed beyond the model),
// and charge = held + pieces + slack, an upper bound of the pool's real reserved memory.
//
// An allocation takes the smallest ready piece that holds need(b) (growth 0), else it must grow by
// need(b). Taking a piece never lets the shadow believe in more reuse than the driver can do: the
// ready pieces are blocks the driver really freed, and a best-fit choice from a subset of the real
// free blocks stays a subset (the driver's coalescing only adds room). A reading of
// CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT (reconcile) corrects the charge off the fast path: higher
// readings are taken at once; a lower one (a trim gave blocks back, or the driver reused a block on
// its own stream before a synchronize showed the free done) lowers the charge to the reading, never
// below held, and forgets every piece, since which blocks went is not known. New pieces come with
// the next frees. Until then the shadow may charge more than the pool holds (safe); at the limit,
// limits.cpp reads the pools, then trims them, rather than refuse (pools.h).
//
// Not thread-safe: the ledger holds its pool mutex around every call.
#pragma once

#include <cstdint>

namespace coloc::interpose {

class PoolShadow {
 public:
  /// Pieces remembered per pool; more are folded into slack (charged, never reused).
  static constexpr int kMaxPieces = 32;
  /// The chunk assumed until set_chunk: 2 MiB, the allocation granularity of device memory on
  /// every GPU CUDA 11-13 supports (CU_MEM_ALLOC_GRANULARITY_MINIMUM).
  static constexpr uint64_t kDefaultChunk = uint64_t(2) << 20;
  /// Stream key meaning "every stream" (a context synchronize).
  static constexpr uint64_t kAllStreams = ~uint64_t(0);

  /// What begin() decided, to be passed to abort() if the allocation does not happen.
  struct Ticket {
    uint64_t need = 0;    ///< round_up(bytes, chunk)
    uint64_t growth = 0;  ///< how much the charge rose (0: a ready piece was taken)
    uint64_t piece = 0;   ///< size of the piece taken (0: none)
    uint64_t piece_stream = 0;  ///< its stream key (kAllStreams: it was ready)
    uint64_t piece_ctx = 0, piece_seq = 0;
    uint64_t spare_before = 0;  ///< spare() when it began (growth with much spare: worth a reading)
  };

  /// Where and when a block was freed: the stream key of its cuMemFreeAsync, the context that
  /// stream belongs to, and the ledger's free sequence number (so that a synchronize only takes
  /// as done the frees queued before it began).
  struct FreeSite {
    uint64_t stream = 0;
    uint64_t ctx = 0;
    uint64_t seq = 0;
  };

  /// Sets the pool's chunk (bytes, a power of two; other values keep the current chunk).
  void set_chunk(uint64_t chunk);
  uint64_t chunk() const { return chunk_; }
  /// round_up(bytes, chunk), saturating at the largest multiple of the chunk.
  uint64_t need(uint64_t bytes) const;

  /// Begins an allocation of `bytes` on stream key `stream`: takes the smallest piece that holds
  /// need(bytes) and is ready or was freed on that same stream (stream order puts this allocation
  /// after that free, and the driver reuses such blocks), or plans a growth of need(bytes). The
  /// charge includes the allocation from here on.
  Ticket begin(uint64_t bytes, uint64_t stream = kAllStreams);
  /// Undoes begin() (the limit or the driver refused).
  void abort(const Ticket& t);
  /// A live block of `bytes` was freed with cuMemFreeAsync at `site`.
  void freed(uint64_t bytes, const FreeSite& site);
  /// A synchronize that began when the free sequence was `seq` returned: the frees queued before
  /// it on stream key `stream` (kAllStreams: on every stream of context `ctx`) have run.
  void synchronized(uint64_t stream, uint64_t ctx, uint64_t seq);
  /// A reading of the pool's reserved memory. `may_lower`: no allocation was in flight since the
  /// reading began (else only a higher reading is taken). Returns the bytes the reading showed
  /// beyond the model (0 when the model held).
  uint64_t reconcile(uint64_t reserved, bool may_lower);
  /// The pool was destroyed: the driver gives back every piece; live blocks stay charged.
  void destroyed();

  uint64_t charge() const { return held_ + pieces_bytes_ + slack_; }
  uint64_t held() const { return held_; }
  /// Charged reserve beyond the live blocks (pieces + slack): what a trim could give back.
  uint64_t spare() const { return pieces_bytes_ + slack_; }
  /// Bytes in ready pieces.
  uint64_t ready_bytes() const;
  int pieces() const { return n_; }

 private:
  struct Piece {
    uint64_t bytes;
    uint64_t stream;  // stream key of the free; kAllStreams once ready
    uint64_t ctx, seq;
  };
  void add_piece(uint64_t bytes, uint64_t stream, uint64_t ctx, uint64_t seq);
  void drop_piece(int i);

  uint64_t chunk_ = kDefaultChunk;
  uint64_t held_ = 0, slack_ = 0, pieces_bytes_ = 0;
  Piece pieces_[kMaxPieces] = {};
  int n_ = 0;
};

}  // namespace coloc::interpose
