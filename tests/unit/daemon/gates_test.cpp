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

  g.set_paused(10, PausedBy::kOwner);
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

  g.set_paused(10, PausedBy::kAdmin);  // the same gate state: nothing is written again
  CHECK(a->gates[0].seq.load() == 1);
  CHECK(g.paused(10) == PausedBy::kAdmin);

  g.set_paused(10, PausedBy::kNobody);
  CHECK(a->gate.load() == kRun);
  CHECK(all_slots(*a, kRun));
  CHECK(a->gates[3].seq.load() == 2);
  CHECK(b->gate.load() == kRun);
}

TEST_CASE("gates: a process joining a paused job starts paused; a job's end forgets its pause") {
  Gates g;
  g.set_paused(7, PausedBy::kAdmin);  // e.g. restored from the saved state before its processes return
  auto a = page();
  g.add_client(1, 7, a.get(), pages::kLayoutVersion);
  CHECK(a->gate.load() == kPaused);
  CHECK(all_slots(*a, kPaused));
  g.remove_client(1);
  g.set_paused(7, PausedBy::kNobody);
  CHECK(a->gate.load() == kPaused);  // a client that left is not written any more
  g.set_paused(7, PausedBy::kOwner);
  g.forget_job(7);
  CHECK(g.paused(7) == PausedBy::kNobody);
  auto b = page();
  g.add_client(2, 7, b.get(), pages::kLayoutVersion);
  CHECK(b->gate.load() == kRun);
}

TEST_CASE("gates: a page without gates (layout 3) is never written, and counts as ungated") {
  Gates g;
  auto old = page(), fresh = page();
  g.add_client(1, 5, old.get(), 3);
  g.add_client(2, 5, fresh.get(), pages::kGatedLayout);
  CHECK(g.ungated(5) == 1);
  CHECK(g.ungated(6) == 0);
  g.set_paused(5, PausedBy::kOwner);
  CHECK(old->gate.load() == kRun);
  CHECK(all_slots(*old, kRun));
  CHECK(old->gate_seq.load() == 0);
  CHECK(fresh->gate.load() == kPaused);
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
