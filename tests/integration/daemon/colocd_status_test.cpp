// colocd's status of devices over time: a device stays in the books after its last job, shown idle.
#include <doctest/doctest.h>

#include <set>

#include "colocd_fixture.h"

using namespace coloc::test;
using nlohmann::json;

TEST_SUITE("daemon") {

TEST_CASE("colocd: a device with no process attached and no admission waiting is shown idle") {
  Colocd d({}, true, false);  // without NVML: colocd sees devices only through its clients, and lists them all
  const std::string go = d.dir() / "go";
  auto a = d.client({"--job", "first", "--mem", "6GiB", "attach:1:10GiB:1GiB", "alloc:0:4GiB", "hold-file:" + go,
                     "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return has_event(*a, "holding"); }));
  REQUIRE(d.status()["devices"].size() == 1);
  CHECK(d.status()["devices"][0]["idle"] == false);
  // A second job waits for admission there: the device is not idle while it waits.
  auto b = d.client({"--job", "second", "--mem", "6GiB", "attach:1:10GiB:1GiB", "goodbye:0", "exit:0"});
  REQUIRE(wait_until([&] { return !d.job("second").is_null() && d.job("second")["state"] == "admission-pending"; }));
  write_file(go, "");
  CHECK(a->wait(20s).exit_code == 0);
  CHECK(b->wait(20s).exit_code == 0);
  REQUIRE(wait_until([&] { return d.status()["jobs"].empty(); }));
  json dev = d.status()["devices"];
  REQUIRE(dev.size() == 1);
  CHECK(dev[0]["idle"] == true);
  CHECK(dev[0]["committed"] == 0);
  CHECK(dev[0]["jobs"].empty());
}

}  // TEST_SUITE

TEST_SUITE("daemon") {

TEST_CASE("colocd status: an idle device colocd can no longer see drops out; one it sees stays") {
  // colocd finds simgpu's NVML, which knows none of the fake client's devices.
  Colocd d;
  auto c = d.client({"--job", "ghost", "attach:5:8GiB:256MiB", "hold"});
  REQUIRE(wait_until([&] { return has_event(*c, "holding"); }));
  // The client's device (uuid c0c0...c005), which NVML does not list: colocd numbers it itself.
  const std::string ghost = "GPU-c0c0c0c0-c0c0-c0c0-c0c0-c0c0c0c0c005";
  auto uuids_of = [](const json& st) {
    std::set<std::string> u;
    for (const json& dev : st["devices"]) u.insert(dev["uuid"].get<std::string>());
    return u;
  };
  auto uuids = [&] { return uuids_of(d.status()); };
  {
    // The message is the status already read: REQUIRE_MESSAGE evaluates its message lazily, while
    // doctest's reporter holds its lock, so one that asserts (d.status() does) deadlocks the binary
    // when it is shown (on a failure, or every success under -s).
    const json st = d.status();
    REQUIRE_MESSAGE(uuids_of(st).count(ghost) == 1, st.dump(1));  // in use: listed
  }
  c->kill(SIGTERM);
  c->wait(10s);
  // Idle, nothing held, and NVML does not know it: it leaves the status. simgpu's own device,
  // which NVML lists, stays (idle, never used by a coloc job).
  CHECK(wait_until([&] { return uuids().count(ghost) == 0; }, 10s));
  json devs = d.status()["devices"];
  REQUIRE(devs.size() == 1);
  CHECK(devs[0]["index_from"] == "nvml");
  CHECK(devs[0]["idle"] == true);
}

}  // TEST_SUITE
