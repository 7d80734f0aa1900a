// daemon/compute/gates: which gate each client's control page gets from its job's pause state,
// written in pages.h's order (slot states, summary, then each changed slot's futex word), and
// never on a page without gates (layout 3 or older).
#include "compute/gates.h"

#include <doctest/doctest.h>

#include <memory>

using coloc::compute::ComputeState;
using coloc::compute::Gates;
using coloc::compute::PausedBy;
namespace pages = coloc::pages;

namespace {

const coloc::broker::JobKey key10{0, "ten"}, key7{0, "seven"}, key5{1000, "five"};
constexpr uint32_t kRun = uint32_t(pages::GateState::kRun);
constexpr uint32_t kPaused = uint32_t(pages::GateState::kPaused);

std::unique_ptr<pages::ControlPage> page() { return std::make_unique<pages::ControlPage>(); }

bool all_slots(const pages::ControlPage& p, uint32_t state) {
  for (const pages::SlotGate& g : p.gates)
    if (g.state.load() != state) return false;
  return true;
}

}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("gates: a pause closes every slot of every page of the job and bumps each futex word once; resume opens them") {
  Gates g;
  auto a = page(), b = page(), other = page();
  g.add_client(1, 10, a.get(), pages::kLayoutVersion);
  g.add_client(2, 10, b.get(), pages::kLayoutVersion);
  g.add_client(3, 11, other.get(), pages::kLayoutVersion);
  CHECK(a->gate.load() == kRun);
  CHECK(a->gates[0].seq.load() == 0);  // nothing changed: nothing written
  CHECK(g.state(10) == ComputeState::kRunning);

  g.set_paused(10, key10, PausedBy::kOwner);
  for (auto* p : {a.get(), b.get()}) {
    CHECK(p->gate.load() == kPaused);
    CHECK(all_slots(*p, kPaused));
    CHECK(p->gates[0].seq.load() == 1);
    CHECK(p->gates[pages::kSlots - 1].seq.load() == 1);
    CHECK(p->gate_seq.load() == 1);
  }
  CHECK(other->gate.load() == kRun);
  CHECK(other->gates[0].seq.load() == 0);
  CHECK(g.paused(10) == PausedBy::kOwner);
  CHECK(g.state(10) == ComputeState::kPaused);

  g.set_paused(10, key10, PausedBy::kAdmin);  // the same gate state: nothing is written again
  CHECK(a->gates[0].seq.load() == 1);
  CHECK(g.paused(10) == PausedBy::kAdmin);

  g.set_paused(10, key10, PausedBy::kNobody);
  CHECK(a->gate.load() == kRun);
  CHECK(all_slots(*a, kRun));
  CHECK(a->gates[3].seq.load() == 2);
  CHECK(b->gate.load() == kRun);
}

TEST_CASE("gates: a process joining a paused job starts paused; a job's end forgets its pause") {
  Gates g;
  g.set_paused(7, key7, PausedBy::kAdmin);  // e.g. restored from the saved state before its processes return
  auto a = page();
  g.add_client(1, 7, a.get(), pages::kLayoutVersion);
  CHECK(a->gate.load() == kPaused);
  CHECK(all_slots(*a, kPaused));
  g.remove_client(1);
  g.set_paused(7, key7, PausedBy::kNobody);
  CHECK(a->gate.load() == kPaused);  // a client that left is not written any more
  g.set_paused(7, key7, PausedBy::kOwner);
  g.forget_job(7, 1000);
  CHECK(g.paused(7) == PausedBy::kOwner);  // kept a while for a process that comes back
  CHECK(g.state(7) == ComputeState::kPaused);
  // A new run of the same job id (not a re-registration) starts unpaused.
  auto b = page();
  g.add_client(2, 8, b.get(), pages::kLayoutVersion);
  CHECK(b->gate.load() == kRun);
  // A process of the ended job that re-registers (job 9, same key) takes the pause over.
  CHECK_FALSE(g.inherit(9, {0, "other"}, 2000));
  CHECK(g.inherit(9, key7, 2000));
  auto c = page();
  g.add_client(3, 9, c.get(), pages::kLayoutVersion);  // the process that came back
  CHECK(c->gate.load() == kPaused);
  CHECK(g.paused(9) == PausedBy::kOwner);
  CHECK(g.paused(7) == PausedBy::kNobody);  // taken over, not shared
  CHECK_FALSE(g.inherit(10, key7, 3000));  // job 9 is live (it has its process)
  // After kEndedPauseNs nobody inherits it.
  g.set_paused(11, key7, PausedBy::kAdmin);
  g.forget_job(11, 5000);
  CHECK_FALSE(g.inherit(12, key7, 5000 + Gates::kEndedPauseNs + 1));
  g.forget_job(12, 5000 + Gates::kEndedPauseNs + 1);  // and it is dropped
  CHECK(g.paused(11) == PausedBy::kNobody);
}

TEST_CASE("gates: a re-registration inherits the pause of a job whose last process left a moment ago") {
  Gates g;
  auto a = page();
  g.add_client(1, 20, a.get(), pages::kLayoutVersion);
  g.set_paused(20, key10, PausedBy::kAdmin);
  CHECK_FALSE(g.inherit(21, key10, 100));  // job 20 still has its process
  g.remove_client(1);                     // it left; the job's end is not final yet
  auto b = page();
  CHECK(g.inherit(21, key10, 200));
  g.add_client(2, 21, b.get(), pages::kLayoutVersion);
  CHECK(b->gate.load() == kPaused);
  CHECK(g.paused(21) == PausedBy::kAdmin);
}

TEST_CASE("gates: a page without gates (layout 3) is never written, and counts as ungated") {
  Gates g;
  auto old = page(), fresh = page();
  g.add_client(1, 5, old.get(), 3);
  g.add_client(2, 5, fresh.get(), pages::kGatedLayout);
  CHECK(g.ungated(5) == 1);
  CHECK(g.ungated(6) == 0);
  g.set_paused(5, key5, PausedBy::kOwner);
  CHECK(old->gate.load() == kRun);
  CHECK(all_slots(*old, kRun));
  CHECK(old->gate_seq.load() == 0);
  CHECK(fresh->gate.load() == kPaused);
  // The count follows clients that leave, and one re-added with gates.
  auto older = page();
  g.add_client(3, 5, older.get(), 3);
  CHECK(g.ungated(5) == 2);
  g.remove_client(1);
  CHECK(g.ungated(5) == 1);
  g.add_client(3, 5, older.get(), pages::kGatedLayout);
  CHECK(g.ungated(5) == 0);
  g.remove_client(3);
  g.remove_client(3);
  CHECK(g.ungated(5) == 0);
}

TEST_CASE("gates: names of who paused, and their inverse") {
  CHECK(std::string(coloc::compute::paused_by_name(PausedBy::kOwner)) == "owner");
  CHECK(std::string(coloc::compute::paused_by_name(PausedBy::kAdmin)) == "admin");
  CHECK(coloc::compute::parse_paused_by("admin") == PausedBy::kAdmin);
  CHECK(coloc::compute::parse_paused_by("owner") == PausedBy::kOwner);
  CHECK_FALSE(coloc::compute::parse_paused_by("").has_value());
  CHECK_FALSE(coloc::compute::parse_paused_by("Admin").has_value());
}
}

namespace {
/// A tracked client's pages with slot 0 attached to device `dev_byte`.
struct Tracked {
  std::unique_ptr<pages::ControlPage> control = std::make_unique<pages::ControlPage>();
  std::unique_ptr<pages::StatsPage> stats = std::make_unique<pages::StatsPage>();
  explicit Tracked(uint8_t dev_byte) {
    control->slots[0].uuid[0] = dev_byte;
    control->slots[0].attached.store(1);
  }
};
}  // namespace

TEST_SUITE("daemon") {
TEST_CASE("gates: usages show a job's completions and whether a process of it is stopped; busy figures per client, busy_until from layout 7") {
  Gates g;
  Tracked a(1), b(1), old(1);
  g.add_client(1, 10, a.control.get(), pages::kLayoutVersion, a.stats.get(), 101);
  g.add_client(2, 10, b.control.get(), pages::kLayoutVersion, b.stats.get(), 102);
  g.add_client(3, 11, old.control.get(), pages::kEstimateLayout, old.stats.get(), 103);  // layout 6
  a.stats->track[0].marks_done.store(5);
  b.stats->track[0].marks_done.store(7);
  a.stats->track[0].busy_ns.store(1000);
  a.stats->busy_until[0].store(5000);
  b.stats->track[0].busy_ns.store(2000);
  b.stats->busy_until[0].store(6000);
  old.stats->track[0].busy_ns.store(3000);
  old.stats->busy_until[0].store(7000);  // not a layout-7 page: never read
  coloc::broker::Uuid d{};
  d.bytes[0] = 1;
  auto u = g.usages();
  REQUIRE(u.count({10, d}));
  CHECK(u[{10, d}].completed == 12);
  CHECK(!u[{10, d}].stopped);
  g.read_stopped([](int pid, uint64_t) { return pid == 102; });
  u = g.usages();
  CHECK(u[{10, d}].stopped);  // one of its processes is
  CHECK(!u[{11, d}].stopped);
  g.read_stopped([](int, uint64_t) { return false; });
  CHECK(!g.usages()[{10, d}].stopped);

  auto f = g.busy_figures();
  REQUIRE(f[{10, d}].size() == 2);
  CHECK(f[{10, d}][0].client == 1);
  CHECK(f[{10, d}][0].busy_ns == 1000);
  CHECK(f[{10, d}][0].busy_until == std::optional<uint64_t>(5000));
  CHECK(f[{10, d}][1].busy_until == std::optional<uint64_t>(6000));
  REQUIRE(f[{11, d}].size() == 1);
  CHECK(f[{11, d}][0].busy_ns == 3000);
  CHECK(!f[{11, d}][0].busy_until.has_value());
  auto one = g.busy_figures(2);
  REQUIRE(one.size() == 1);
  REQUIRE(one[{10, d}].size() == 1);
  CHECK(one[{10, d}][0].client == 2);
}
}
