// End-to-end: a mass start. Hundreds of `coloc run` jobs start at the same moment, as a scheduler
// starts a node's worth of array tasks; every one must register, be admitted, allocate and finish
// without ever losing its connection to colocd (a stale event of a closed connection reaching the
// one that reused its descriptor number closed healthy connections: "lost the connection to
// colocd ... reconnecting" in some of them) and without running outside the books.
#include "e2e.h"

using namespace coloc::test;
using namespace coloc::test::e2e;

TEST_SUITE("e2e") {

TEST_CASE("e2e: 3 x 200 simultaneous coloc run starts: every job registers and finishes, none loses its connection") {
  if (simulated_only()) return;
  // 200 contexts of 512 MiB would not fit an 80 GiB device: small contexts, on both sides.
  // Sanitizer builds start each process several times slower: fewer at once there (the race
  // needs many connections closing and opening in one batch, which a hundred already give).
  const std::string san = sanitizer();
  const int jobs = san.empty() ? 200 : san == "asan" ? 100 : 50;
  const int rounds = san.empty() ? 3 : 1;
  Node n("80GiB");
  const std::vector<std::pair<std::string, std::string>> small = {{"SIMGPU_CONTEXT_BYTES", "64MiB"},
                                                                   {"COLOC_CONTEXT_BYTES", "64MiB"}};
  size_t lost = 0, outside = 0, failed = 0;
  std::string first_bad;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::unique_ptr<Proc>> procs;
    procs.reserve(jobs);
    for (int i = 0; i < jobs; ++i)
      procs.push_back(n.run({"--job", "m" + std::to_string(round) + "-" + std::to_string(i), "--mem", "256MiB"},
                            {cuprobe(), "init", "ctx", "0", "alloc", "16MiB", "a", "free", "a"}, small));
    for (auto& p : procs) {
      ProcResult r = p->wait(120s);
      const bool ok = r.exit_code == 0 && step(r.out, "alloc")["rc_name"] == "CUDA_SUCCESS";
      const bool was_lost = r.err.find("lost the connection") != std::string::npos ||
                            r.err.find("reconnect") != std::string::npos;
      const bool standalone = r.err.find("standalone") != std::string::npos ||
                              r.err.find("running without") != std::string::npos;
      lost += was_lost;
      outside += standalone;
      failed += !ok;
      if ((was_lost || standalone || !ok) && first_bad.empty()) first_bad = describe(r);
    }
  }
  INFO("first job that went wrong:\n", first_bad, "\ncolocd:\n", n.log().substr(0, 20000));
  CHECK(lost == 0);
  CHECK(outside == 0);
  CHECK(failed == 0);
  // Every job got its report: all of them were in colocd's books.
  size_t reports = 0;
  std::error_code ec;
  REQUIRE(wait_until([&] {
    reports = 0;
    for (const auto& e : std::filesystem::directory_iterator(n.state() + "/reports", ec))
      reports += e.path().filename().string().rfind("m", 0) == 0;
    return reports >= size_t(jobs * rounds);
  }, 60s, 20ms));
  CHECK(reports == size_t(jobs * rounds));
  json s = n.status();
  CHECK(s["jobs"].size() == 0);
  CHECK(s["devices"][0]["granted"] == 0);
}

}  // TEST_SUITE
