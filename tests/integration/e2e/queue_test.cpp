// End-to-end: the node queue (issue 28) on one simulated 80 GiB device. The three jobs:
// `train` (--mem 20GiB) runs, `finetune` (--mem 70GiB) waits for it, and the best-effort
// `notebook` (--mem 2GiB) is backfilled into memory `finetune` will not need, instead of waiting
// behind it; `finetune` still starts as soon as `train` ends. `coloc status --json` and
// `coloc jobs` give each waiting job its reason and position, and the waiting job's stderr line
// says them, with a best-effort job behind `finetune` for its priority.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e queue: a small best-effort job is backfilled while a big one waits, and the big one starts when the first ends") {
  if (simulated_only()) return;
  Node n("80GiB");  // 78.40 GiB usable
  auto train = n.run({"--job", "train", "--mem", "20GiB"},
                     {cuprobe(), "init", "ctx", "0", "touch", n.file("train-up"), "hold-file", n.file("train-go")});
  REQUIRE(reached(*train, n.file("train-up")));
  auto finetune = n.run({"--job", "finetune", "--mem", "70GiB"},
                        {cuprobe(), "init", "ctx", "0", "touch", n.file("ft-up"), "hold-file", n.file("ft-go")});
  REQUIRE(n.wait_state("finetune", "admission-pending"));
  // A job of the same priority asking more than `train` will leave beyond `finetune`'s need: it
  // waits behind `finetune` (Queue).
  auto big = n.run({"--job", "big", "--mem", "10GiB"}, {cuprobe(), "init", "ctx", "0"});
  REQUIRE(n.wait_state("big", "admission-pending"));
  // A best-effort job asking more than that extra waits behind `finetune` for its priority.
  auto low = n.run({"--job", "low", "--mem", "10GiB", "--priority", "best-effort"}, {cuprobe(), "init", "ctx", "0"});
  REQUIRE(n.wait_state("low", "admission-pending"));
  // 8.40 GiB will be free beyond `finetune`'s 70 once `train` ends: `notebook` fits in them.
  auto notebook = n.run({"--job", "notebook", "--mem", "2GiB", "--priority", "best-effort"},
                        {cuprobe(), "init", "ctx", "0", "touch", n.file("nb-up"), "hold-file", n.file("nb-go")});
  REQUIRE_MESSAGE(reached(*notebook, n.file("nb-up")), n.status_text());
  json ft = n.job("finetune");
  CHECK(ft["state"] == "admission-pending");
  INFO(ft.dump());
  REQUIRE(ft["queue"].is_object());
  CHECK(ft["queue"]["reason"] == "Resources");
  CHECK(ft["queue"]["position"] == 1);
  CHECK(ft["queue"]["asks"] == 70ull << 30);
  CHECK(ft["queue"]["asks_source"] == "mem");
  CHECK(ft["queue"]["missing"] == (70ull << 30) - n.status()["devices"][0]["available"].get<uint64_t>());
  CHECK(ft["queue"]["held_by"][0]["job"].get<std::string>().rfind("train-", 0) == 0);
  CHECK(ft["queue"]["estimated_start_s"].is_null());  // `train` has no history: its end is not known
  json b = n.job("big");
  CHECK(b["queue"]["reason"] == "Queue");
  CHECK(b["queue"]["position"] == 2);
  CHECK(b["queue"]["behind"].get<std::string>().rfind("finetune-", 0) == 0);
  json lo = n.job("low");
  CHECK(lo["queue"]["reason"] == "Priority");
  CHECK(lo["queue"]["behind"].get<std::string>().rfind("finetune-", 0) == 0);
  json nb = n.job("notebook");
  CHECK(nb["state"] == "running");
  CHECK(nb["devices"][0]["backfilled"] == true);
  ProcResult jobs = n.cli({"jobs"});
  CHECK_MESSAGE(jobs.out.find("Queue(finetune-") != std::string::npos, jobs.out);
  CHECK_MESSAGE(jobs.out.find("Resources") != std::string::npos, jobs.out);
  // The waiting job's line says where it stands.
  REQUIRE_MESSAGE(wait_until([&] { return finetune->err_so_far().find("#1 in line, Resources: ") != std::string::npos; }, 20s),
                  finetune->err_so_far());
  CHECK_MESSAGE(finetune->err_so_far().find("it asks 70.00 GiB (its declared footprint, COLOC_MEM_LIMIT / --mem)") !=
                    std::string::npos,
                finetune->err_so_far());
  CHECK_MESSAGE(finetune->err_so_far().find("it waits until it is admitted") != std::string::npos, finetune->err_so_far());
  for (auto [proc, words] : {std::pair{&big, "#2 in line, Queue: behind finetune-"},
                             std::pair{&low, "in line, Priority: behind finetune-"}}) {
    CHECK_MESSAGE(wait_until([&] { return (*proc)->err_so_far().find(words) != std::string::npos; }, 20s),
                  (*proc)->err_so_far());
  }
  CHECK_MESSAGE(low->err_so_far().find(", of a higher priority; it asks 10.00 GiB") != std::string::npos, low->err_so_far());
  // `train` ends: `finetune` starts at once, ahead of `big` (which still does not fit).
  write_file(n.file("train-go"), "");
  finish(*train);
  REQUIRE_MESSAGE(reached(*finetune, n.file("ft-up")), n.status_text());
  CHECK(n.job("big")["state"] == "admission-pending");
  write_file(n.file("nb-go"), "");
  write_file(n.file("ft-go"), "");
  finish(*notebook);
  finish(*finetune);
  ProcResult rb = finish(*big);
  CHECK(step(rb.out, "ctx")["rc_name"] == "CUDA_SUCCESS");
  ProcResult rl = finish(*low);
  CHECK(step(rl.out, "ctx")["rc_name"] == "CUDA_SUCCESS");
}

}  // TEST_SUITE
