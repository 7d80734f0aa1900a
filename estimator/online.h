// estimator/online.h — the online estimator: finds a job's iteration period in its stream of
// allocation, free and synchronize events, and predicts each device's peak memory from it.
//
// How (estimator/README.md has the longer story):
//   1. Every event becomes a token: XXH3-64 of (kind, slot, launches, size, in_use). Including
//      in_use keeps sub-patterns apart (12 identical transformer layers allocate the same sizes,
//      but at rising in_use), so the period found is the iteration, not a layer.
//   2. Candidates: a fixed open-addressed table maps each token to the position where it last
//      occurred; the distance from there to the current event is a candidate period P. Up to
//      kCandidates candidates are checked in parallel, each by comparing every new token with the
//      token P events earlier.
//   3. A candidate is confirmed ("two periods agree") once a full period of events, P of them,
//      has been compared with the P before, with at most one mismatch in kCandidateMissDiv and
//      never kCandidateMissRun mismatches in a row (a pair swapped by two threads costs two). When
//      the stream synchronizes (a training loop reads its loss once per iteration), the period
//      must also contain a synchronize, which rules out sub-iteration repeats.
//   4. While stable, every token is compared with the one P earlier; a mismatch fraction above
//      kMaxMismatchPermille of the last max(P, kMinWindow) events, or kMaxConsecutiveMisses in a
//      row, is a phase change (kChanging), and detection starts over.
//   5. At confirmation and at every period boundary after it, each slot's prediction becomes
//      max(previous prediction, peak of in_use over the last period × (1 + kPeakMargin)). It never
//      goes down while the object lives (an evaluation phase does not lower it).
//
// Rules for this header (it is compiled into libcoloc.so, which runs in other people's processes):
//   header-only; the C++ standard headers and inline xxHash only (plus coloc/protocol.h for the
//   device count); no allocation (fixed arrays inside the object), no exceptions, no logging, no
//   threads; every function is noexcept. One consumer thread uses an object: no locking.
//   Per event: O(kCandidates + kTableProbes); once per period, a scan of the period's events.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "coloc/protocol.h"

namespace coloc::est {

/// What an event is. kSync: a stream/context/event synchronize (a training loop does one per
/// iteration when it reads the loss).
enum class EventKind : uint8_t { kAlloc = 1, kFree = 2, kSync = 3 };

/// One event as the interposer records it, in program order per process.
struct Event {
  EventKind kind;
  uint8_t slot;        ///< device slot, 0..proto::kMaxDevices-1; other values are hashed but not tracked
  uint32_t launches;   ///< kernel launches by the recording thread since its previous event (saturating)
  uint64_t size;       ///< bytes allocated or freed (0 for kSync)
  uint64_t in_use;     ///< bytes in use on `slot` right after the event (the process's ledger, contexts included)
};

/// Token of an event: XXH3-64 of (kind, slot, launches, size, in_use), packed little-endian
/// without padding (22 bytes), so equal events give equal tokens whatever the struct layout.
inline uint64_t token(const Event& e) noexcept {
  unsigned char b[22];
  b[0] = static_cast<unsigned char>(e.kind);
  b[1] = e.slot;
  std::memcpy(b + 2, &e.launches, 4);
  std::memcpy(b + 6, &e.size, 8);
  std::memcpy(b + 14, &e.in_use, 8);
  return XXH3_64bits(b, sizeof b);
}

/// Where detection stands.
///   kLearning: no period yet (since construction, reset(), or a loss before any prediction);
///   kStable:   a period P holds: the last P events equal the P before them, up to a small
///              mismatch fraction;
///   kChanging: a stable period broke (a phase change), or events were lost after a prediction
///              was made: looking for a new period; the prediction is kept;
///   kNone:     events keep coming but no period was found in a long search (kNoneEvents events,
///              kNoneSyncs synchronizes, or kNoneFailures candidates that had matched a while and
///              then failed): "no stable period" (a leak, random allocations). Not final: a period
///              found later makes it kStable.
enum class OnlineState : uint8_t { kLearning = 0, kStable = 1, kChanging = 2, kNone = 3 };

/// "learning", "stable", "changing", "none" ("?" for a value out of range).
inline const char* state_name(OnlineState s) noexcept {
  switch (s) {
    case OnlineState::kLearning: return "learning";
    case OnlineState::kStable: return "stable";
    case OnlineState::kChanging: return "changing";
    case OnlineState::kNone: return "none";
  }
  return "?";
}

/// The margin added over the observed per-period maximum: 1%. The targets bound it: the final
/// prediction must lie within 2% of the true peak (so margin <= 2%), and never more than 1% under
/// it. 1% absorbs small period-to-period variation (a tensor or two that differ between
/// iterations), while over-reserving by at most 1% of a stationary job's peak.
inline constexpr double kPeakMargin = 0.01;

/// Finds the period of one process's event stream and predicts its per-device peak.
/// About 470 KiB (the history and the table are arrays inside the object): keep one per process,
/// statically or inside another object, not on a small stack.
class PeriodDetector {
 public:
  /// Events of history kept (tokens, in_use, slot): a period longer than kHistory/2 events is not
  /// found. 16384 covers an iteration of a few thousand driver allocations without a caching
  /// allocator, with room for two of them.
  static constexpr uint32_t kHistory = 16384;
  /// The longest period looked for, in events: two periods must fit in the history.
  static constexpr uint32_t kMaxPeriod = kHistory / 2;
  /// Entries of the last-position table (a power of two): twice the distinct tokens a period of
  /// kMaxPeriod events can hold, so the load stays at or under one half.
  static constexpr uint32_t kTableSize = 2 * kMaxPeriod;
  /// Slots probed per lookup or insert. When all are taken by live tokens, the oldest is replaced:
  /// the table is lossy, which costs at most a candidate, never a wrong answer (every candidate is
  /// checked against the history).
  static constexpr uint32_t kTableProbes = 8;
  /// Candidate periods checked in parallel. Sub-iteration repeats (a buffer allocated and freed
  /// twice at the same level) each create a short-lived candidate; 16 leave room for those while
  /// the true one is checked through a whole period.
  static constexpr uint32_t kCandidates = 16;
  /// A candidate survives one mismatch per 16 matches (6%): two threads swapping a pair of events
  /// cost 2 mismatches in each of two periods, far under this for periods of tens of events.
  static constexpr uint32_t kCandidateMissDiv = 16;
  /// A candidate dies at this many mismatches in a row: a swapped pair makes 2, a wrong period more.
  static constexpr uint32_t kCandidateMissRun = 3;
  /// In a stream without synchronizes, a period is confirmed only after this many events compared
  /// (so an alloc/free pair repeated twice is not a period); with synchronizes the sync rule does
  /// that job and a period of 1 event (one sync per iteration) is confirmed after 2 equal events.
  static constexpr uint32_t kMinComparedNoSync = 16;
  /// Stable: mismatches are counted over the last max(P, kMinWindow) events, so a period of one
  /// event still tolerates a stray event or two.
  static constexpr uint32_t kMinWindow = 64;
  /// Stable: more than 10% mismatches over the window is a phase change.
  static constexpr uint32_t kMaxMismatchPermille = 100;
  /// Stable: this many mismatches in a row is a phase change (a swapped pair makes 2; a short
  /// burst of interleaving from two threads a few more).
  static constexpr uint32_t kMaxConsecutiveMisses = 8;
  /// Searching: kNone after this many events without a period: a period of up to kMaxPeriod
  /// events is confirmed within 2 × kMaxPeriod events once the warm-up is over.
  static constexpr uint32_t kNoneEvents = kHistory;
  /// Searching: kNone after this many synchronizes without a period, as a job that reads its loss
  /// once per iteration has run 16 iterations by then: past a warm-up of a few and two agreeing
  /// periods, with room for a job that synchronizes a few times per iteration.
  static constexpr uint32_t kNoneSyncs = 16;
  /// Searching: kNone after this many candidates failed that had matched kSeriousMatches events:
  /// repeated near-periods that never hold.
  static constexpr uint32_t kNoneFailures = 64;
  static constexpr uint32_t kSeriousMatches = 8;
  /// A synchronize this recent (in events) makes the sync rule apply: a period must contain one.
  static constexpr uint32_t kSyncRecent = kMaxPeriod;
  /// Matched events after which the evidence part of the confidence is full.
  static constexpr uint32_t kConfidentMatches = 64;
  /// Devices tracked per process.
  static constexpr uint32_t kSlots = proto::kMaxDevices;

  /// Feeds one event. `now_ns`: monotonic time it was seen (may be coarse, equal for a batch).
  void add(const Event& e, uint64_t now_ns) noexcept {
    const uint64_t i = n_;
    const uint32_t h = uint32_t(i % kHistory);
    const uint64_t t = token(e);
    tok_[h] = t;
    launches_total_ += e.launches;
    launch_sum_[h] = launches_total_;
    in_use_hist_[h] = e.in_use;
    slot_hist_[h] = e.slot;
    if (e.slot < kSlots) cur_[e.slot] = e.in_use;
    if (e.kind == EventKind::kSync) {
      last_sync_ = i + 1;
      ++syncs_;
    }
    last_ns_ = now_ns;
    if (state_ == OnlineState::kStable)
      stable_step(i);
    else
      search_step(i, t, now_ns);
    table_put(t, i);
    n_ = i + 1;
  }

  /// Events were dropped (ring overflow): the history no longer lines up, so detection starts
  /// over from the next event; the prediction is kept (state kChanging when there is one, else
  /// kLearning).
  void lost(uint64_t now_ns) noexcept {
    last_ns_ = now_ns;
    base_ = n_;
    last_sync_ = 0;
    start_search(has_prediction_ ? OnlineState::kChanging : OnlineState::kLearning, n_);
  }

  OnlineState state() const noexcept { return state_; }
  /// P, in events, while kStable; 0 otherwise.
  uint32_t period_events() const noexcept { return state_ == OnlineState::kStable ? period_ : 0; }
  /// Mean duration of one period in ns while kStable, from the now_ns stamps since the candidate
  /// that became the period started matching: (last now_ns − that start) × P / events between;
  /// 0 otherwise.
  uint64_t period_ns() const noexcept {
    if (state_ != OnlineState::kStable || n_ == 0 || n_ - 1 <= measure_index_ || last_ns_ <= measure_ns_) return 0;
    return uint64_t(double(last_ns_ - measure_ns_) * double(period_) / double(n_ - 1 - measure_index_));
  }
  /// now_ns of the event at which the current period became stable, while kStable; 0 otherwise.
  uint64_t stable_since_ns() const noexcept { return state_ == OnlineState::kStable ? stable_since_ns_ : 0; }
  /// 0 unless kStable. While stable: agreement × evidence / 1000, where agreement = 1000 − 1000 ×
  /// mismatches / events compared over the last max(P, kMinWindow) events, and evidence = 1000 ×
  /// min(1, matched events since the candidate started / kConfidentMatches): a period of
  /// hundreds of events is confident at once, a period of one sync after 64 iterations.
  uint32_t confidence_permille() const noexcept {
    if (state_ != OnlineState::kStable) return 0;
    const uint64_t window = window_len();
    const uint64_t compared = n_ - stable_start_ < window ? n_ - stable_start_ : window;
    const uint64_t agree = compared ? 1000 - 1000 * window_misses_ / compared : 1000;
    const uint64_t evidence = matched_ >= kConfidentMatches ? 1000 : 1000 * matched_ / kConfidentMatches;
    return uint32_t(agree * evidence / 1000);
  }
  /// Predicted peak of `slot` in bytes (see the file comment's step 5); 0 while never stable, and
  /// for a slot out of range or never seen.
  uint64_t predicted_peak(int slot) const noexcept {
    return slot >= 0 && uint32_t(slot) < kSlots ? prediction_[slot] : 0;
  }
  /// Periods completed since the current period became stable (0 at confirmation); 0 when not
  /// stable.
  uint64_t iterations() const noexcept { return state_ == OnlineState::kStable ? iterations_ : 0; }
  /// Events fed since construction or reset().
  uint64_t events() const noexcept { return n_; }
  /// Forgets everything, the prediction included (a new process).
  void reset() noexcept {
    n_ = base_ = last_sync_ = 0;
    last_ns_ = 0;
    launches_total_ = 0;
    std::memset(table_pos_, 0, sizeof table_pos_);
    for (uint32_t s = 0; s < kSlots; ++s) cur_[s] = start_in_use_[s] = prediction_[s] = 0;
    has_prediction_ = false;
    start_search(OnlineState::kLearning, 0);
  }

 private:
  struct Candidate {
    uint32_t period = 0;
    uint32_t matched = 0;    ///< events equal to the one `period` earlier
    uint32_t missed = 0;     ///< events that differed
    uint32_t miss_run = 0;   ///< mismatches in a row, now
    uint64_t start_index = 0;
    uint64_t start_ns = 0;
  };

  // ---- searching (kLearning, kChanging, kNone) ----
  void start_search(OnlineState s, uint64_t from) noexcept {
    state_ = s;
    n_cand_ = 0;
    failures_ = 0;
    syncs_ = 0;
    search_start_ = from;
    period_ = 0;
    iterations_ = 0;
  }

  bool matches(uint64_t i, uint32_t p) const noexcept {
    return p >= 1 && i >= base_ + p && tok_[i % kHistory] == tok_[(i - p) % kHistory];
  }

  /// Sync rule: with a synchronize in the last kSyncRecent events, a period of `p` events must
  /// contain one (the last one is among the last p events); otherwise at least kMinComparedNoSync
  /// events must have been compared.
  bool may_confirm(uint64_t i, const Candidate& c) const noexcept {
    const uint64_t compared = uint64_t(c.matched) + c.missed;
    if (compared < c.period) return false;
    // A training iteration launches kernels: once the job has launched any, a period whose events
    // carry none is not one (back-to-back synchronizes, e.g. several `.item()` calls in a row,
    // would otherwise repeat as a period of one event).
    if (launches_total_ > 0 && i >= base_ + c.period &&
        launch_sum_[i % kHistory] == launch_sum_[(i - c.period) % kHistory])
      return false;
    const bool sync_recent = last_sync_ > base_ && i + 1 - last_sync_ < kSyncRecent;
    if (sync_recent) return i + 1 - last_sync_ < c.period;   // last sync at index i + 1 - (i + 1 - last_sync_)
    return compared >= kMinComparedNoSync;
  }

  void search_step(uint64_t i, uint64_t t, uint64_t now_ns) noexcept {
    int best = -1;
    for (uint32_t k = 0; k < n_cand_;) {
      Candidate& c = cand_[k];
      if (matches(i, c.period)) {
        ++c.matched;
        c.miss_run = 0;
      } else {
        ++c.missed;
        ++c.miss_run;
      }
      if (c.miss_run >= kCandidateMissRun || uint64_t(c.missed) * kCandidateMissDiv > c.matched) {
        if (c.matched >= kSeriousMatches) ++failures_;
        cand_[k] = cand_[--n_cand_];   // order does not matter; re-examine the moved one
        if (best == int(n_cand_)) best = int(k);
        continue;
      }
      if (may_confirm(i, c) && (best < 0 || c.period < cand_[best].period)) best = int(k);
      ++k;
    }
    if (best >= 0) {
      confirm(i, cand_[best]);
      return;
    }
    // A new candidate: the distance to the last occurrence of this token.
    const uint32_t d = table_distance(t, i);
    if (d && d <= kMaxPeriod && i >= base_ + d) {
      bool known = false;
      for (uint32_t k = 0; k < n_cand_ && !known; ++k) known = cand_[k].period == d;
      if (!known) {
        uint32_t slot = n_cand_;
        if (n_cand_ == kCandidates) {   // full: replace the one with the least evidence
          slot = 0;
          for (uint32_t k = 1; k < n_cand_; ++k)
            if (cand_[k].matched < cand_[slot].matched) slot = k;
        } else {
          ++n_cand_;
        }
        cand_[slot] = Candidate{d, 1, 0, 0, i, now_ns};
        if (may_confirm(i, cand_[slot])) {
          confirm(i, cand_[slot]);
          return;
        }
      }
    }
    if (state_ != OnlineState::kNone &&
        (i + 1 - search_start_ >= kNoneEvents || syncs_ >= kNoneSyncs || failures_ >= kNoneFailures))
      state_ = OnlineState::kNone;
  }

  void confirm(uint64_t i, const Candidate& c) noexcept {
    state_ = OnlineState::kStable;
    period_ = c.period;
    stable_since_ns_ = last_ns_;
    measure_index_ = c.start_index;
    measure_ns_ = c.start_ns;
    matched_ = c.matched;
    iterations_ = 0;
    boundary_ = i;
    stable_start_ = i + 1;
    window_misses_ = 0;
    miss_run_ = 0;
    n_cand_ = 0;
    // The slots' in_use at the window's start equals the one at its end, by periodicity.
    for (uint32_t s = 0; s < kSlots; ++s) start_in_use_[s] = cur_[s];
    update_prediction(i);
  }

  // ---- stable ----
  uint64_t window_len() const noexcept { return period_ > kMinWindow ? period_ : kMinWindow; }

  void stable_step(uint64_t i) noexcept {
    const bool miss = !matches(i, period_);
    const uint64_t w = window_len();
    const uint32_t h = uint32_t(i % kHistory);
    if (i >= stable_start_ + w) {
      const uint32_t old = uint32_t((i - w) % kHistory);
      if (miss_bits_[old / 64] >> (old % 64) & 1) --window_misses_;
    }
    if (miss) {
      miss_bits_[h / 64] |= uint64_t(1) << (h % 64);
      ++window_misses_;
      ++miss_run_;
    } else {
      miss_bits_[h / 64] &= ~(uint64_t(1) << (h % 64));
      miss_run_ = 0;
      ++matched_;
    }
    if (uint64_t(window_misses_) * 1000 > w * kMaxMismatchPermille || miss_run_ >= kMaxConsecutiveMisses) {
      start_search(OnlineState::kChanging, i);
      return;
    }
    if (i - boundary_ == period_) {
      update_prediction(i);
      for (uint32_t s = 0; s < kSlots; ++s) start_in_use_[s] = cur_[s];
      boundary_ = i;
      ++iterations_;
    }
  }

  /// in_use × (1 + kPeakMargin), rounded up, saturating.
  static uint64_t with_margin(uint64_t v) noexcept {
    const double add = double(v) * kPeakMargin;
    if (add >= 18446744073709551615.0) return UINT64_MAX;
    uint64_t a = uint64_t(add);
    if (double(a) < add) ++a;
    return v > UINT64_MAX - a ? UINT64_MAX : v + a;
  }

  /// Raises each slot's prediction to the peak over the period ending at event i (events
  /// i-P+1..i and the slot's in_use at the period's start) plus the margin.
  void update_prediction(uint64_t i) noexcept {
    uint64_t peak[kSlots];
    for (uint32_t s = 0; s < kSlots; ++s) peak[s] = start_in_use_[s];
    for (uint64_t j = i + 1 - period_; j <= i; ++j) {
      const uint32_t h = uint32_t(j % kHistory);
      const uint8_t s = slot_hist_[h];
      if (s < kSlots && in_use_hist_[h] > peak[s]) peak[s] = in_use_hist_[h];
    }
    for (uint32_t s = 0; s < kSlots; ++s) {
      const uint64_t p = with_margin(peak[s]);
      if (p > prediction_[s]) prediction_[s] = p;
    }
    has_prediction_ = true;
  }

  // ---- last-position table: token -> 1 + index of its last occurrence (low 32 bits; 0 = empty) ----
  uint32_t table_distance(uint64_t t, uint64_t i) const noexcept {
    const uint32_t now = uint32_t(i + 1);
    for (uint32_t k = 0; k < kTableProbes; ++k) {
      const uint32_t j = uint32_t(t + k) & (kTableSize - 1);
      if (table_pos_[j] && table_key_[j] == t) {
        const uint32_t d = now - table_pos_[j];   // = i - the index stored
        if (d == 0 || d > i) return 0;
        return tok_[(i - d) % kHistory] == t ? d : 0;   // checked against the history
      }
    }
    return 0;
  }

  void table_put(uint64_t t, uint64_t i) noexcept {
    const uint32_t now = uint32_t(i + 1);
    uint32_t victim = kTableSize, victim_age = 0;
    for (uint32_t k = 0; k < kTableProbes; ++k) {
      const uint32_t j = uint32_t(t + k) & (kTableSize - 1);
      if (table_pos_[j] && table_key_[j] == t) {
        table_pos_[j] = now;
        return;
      }
      // Empty, or older than any period looked for (or from before base_): free to take.
      const uint32_t age = table_pos_[j] ? now - table_pos_[j] : UINT32_MAX;
      const bool stale = age > kMaxPeriod || age > i - base_;
      if (victim == kTableSize || (stale ? UINT32_MAX : age) > victim_age) {
        victim = j;
        victim_age = stale ? UINT32_MAX : age;
      }
    }
    table_key_[victim] = t;
    table_pos_[victim] = now;
  }

  // History (indexed by event index mod kHistory).
  uint64_t tok_[kHistory] = {};
  uint64_t launch_sum_[kHistory] = {};  // launches of every event up to and including this one
  uint64_t launches_total_ = 0;
  uint64_t in_use_hist_[kHistory] = {};
  uint8_t slot_hist_[kHistory] = {};
  uint64_t miss_bits_[kHistory / 64] = {};
  uint64_t table_key_[kTableSize] = {};
  uint32_t table_pos_[kTableSize] = {};

  uint64_t n_ = 0;             // events fed
  uint64_t base_ = 0;          // first index comparisons may reach back to (after lost())
  uint64_t last_sync_ = 0;     // 1 + index of the last kSync, 0 = none
  uint64_t last_ns_ = 0;

  OnlineState state_ = OnlineState::kLearning;
  Candidate cand_[kCandidates] = {};
  uint32_t n_cand_ = 0;
  uint32_t failures_ = 0;
  uint32_t syncs_ = 0;         // synchronizes since the search started
  uint64_t search_start_ = 0;

  uint32_t period_ = 0;
  uint64_t stable_since_ns_ = 0;
  uint64_t stable_start_ = 0;  // first index compared while stable
  uint64_t boundary_ = 0;      // index of the last event of the last period evaluated
  uint64_t iterations_ = 0;
  uint64_t measure_index_ = 0, measure_ns_ = 0;
  uint64_t matched_ = 0;
  uint32_t window_misses_ = 0, miss_run_ = 0;

  uint64_t cur_[kSlots] = {};
  uint64_t start_in_use_[kSlots] = {};
  uint64_t prediction_[kSlots] = {};
  bool has_prediction_ = false;
};

}  // namespace coloc::est
