// daemon/engine/server_reload.cpp — colocd's settings at run time: the config file's compute
// policies (the policy store's configured layer) and SIGHUP, which reads the file again.
//
// SIGHUP builds a whole new configuration (config::load: defaults, the file, then the flags
// given at start), so a bad file changes nothing: the error is logged on one line (file:line:
// key: what) and the running configuration stays. Otherwise what can change live changes now
// (config::Setting::live: headroom, the per-user cap, the wait and hello timeouts, the
// connection cap, the groups, the log level, the sample interval, the compute policies, the
// metrics listener) and what cannot (the socket, the state directory, the grant step, the
// watcher, the resume grace, the history) is logged as needing a restart and keeps its running
// value.
#include <grp.h>
#include <sys/timerfd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/server.h"
#include "util/log.h"

namespace coloc::engine {

namespace {

std::string policy_text(const compute::PolicySettings& s) {
  std::string out = compute::mode_name(s.mode);
  if (s.mode == proto::PolicyMode::kTimeslice) out += " (quantum " + config::format_duration(s.quantum) + ")";
  if (s.mode == proto::PolicyMode::kPriority) out += " (target slowdown " + std::to_string(s.target_pct) + "%)";
  return out;
}

/// What the scheduler should hold for settings `s`: the quantum only for timeslice, the target
/// only for priority (as `coloc policy` sets them), so equal policies compare equal.
compute::PolicySettings normalized(compute::PolicySettings s) {
  const compute::PolicySettings d;
  if (s.mode != proto::PolicyMode::kTimeslice) s.quantum = d.quantum;
  if (s.mode != proto::PolicyMode::kPriority) s.target_pct = d.target_pct;
  return s;
}

}  // namespace

std::vector<broker::Uuid> Server::known_devices() const {
  std::vector<broker::Uuid> out;
  for (const broker::Device& d : broker_.devices()) out.push_back(d.uuid);
  if (memory_reader_)
    if (auto devs = memory_reader_->devices())
      for (const broker::Uuid& u : *devs)
        if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  return out;
}

void Server::configure_policies() {
  std::map<broker::Uuid, compute::PolicySettings> devs;
  for (const auto& [uuid, dp] : cfg_.devices) devs[uuid] = normalized(dp.settings);
  const compute::PolicySettings dflt = normalized(cfg_.policy);
  policies_.set_configured(dflt == compute::PolicySettings{} ? std::nullopt : std::optional(dflt), std::move(devs));
}

void Server::warn_unknown_devices() {
  const std::vector<broker::Uuid> known = known_devices();
  for (const auto& [uuid, dp] : cfg_.devices)
    if (std::find(known.begin(), known.end(), uuid) == known.end())
      log::get("engine")->warn("{}:{}: devices.\"{}\": no device has this UUID now; its policy applies if one appears",
                               cfg_.config_file, dp.line, uuid.str());
}

void Server::reload_config() {
  auto lg = log::get("engine");
  auto loaded = config::load(cfg_.config_path, cfg_.config_required, cfg_.flags);
  if (!loaded) {
    lg->error("SIGHUP: keeping the running configuration: {}", loaded.error().message());
    return;
  }
  config::Config next = std::move(loaded.value());
  const std::string file = next.config_file.empty() ? "no config file" : next.config_file;
  // (the error names the file, the line and the key, or the flag)
  auto admin = config::lookup_group(next, "admin_group");
  auto high = config::lookup_group(next, "high_priority_group");
  if (!admin || !high) {
    lg->error("SIGHUP: keeping the running configuration: {}", (!admin ? admin.error() : high.error()).message());
    return;
  }

  // A new metrics address: served now, or (when it cannot be bound) the old one kept. (Also when
  // the address is the same but nothing serves it: an earlier reload could bind neither.)
  const bool metrics_down = !exporter_ && !next.metrics_listen.empty();
  if ((next.metrics_listen != cfg_.metrics_listen || metrics_down) &&
      !switch_metrics(cfg_.metrics_listen, next.metrics_listen)) {
    next.metrics_listen = cfg_.metrics_listen;
    next.sources["metrics_listen"] = cfg_.sources["metrics_listen"];
  }

  // What cannot change live keeps its running value.
  std::vector<std::string> changes;
  for (const config::Setting* s : config::changed(cfg_, next)) {
    const std::string was = s->show(cfg_), now_text = s->show(next);
    if (s->live) {
      changes.push_back(fmt::format("{} {} -> {}", s->key, was.empty() ? "none" : was, now_text.empty() ? "none" : now_text));
      continue;
    }
    lg->warn("SIGHUP: {}: {} changed ('{}' -> '{}'): needs a restart; keeping '{}'", file, s->key, was, now_text, was);
    (void)s->set(next, was, s->key);
    next.sources[s->key] = cfg_.sources[s->key];
  }

  // The file's device tables replace what `coloc policy` stored for those devices, and its default
  // (when it sets one) the stored `coloc policy all`.
  bool store_changed = false;
  for (const auto& [uuid, dp] : next.devices) store_changed |= policies_.erase(uuid);
  for (const char* key : {"policy", "quantum", "target_slowdown"})
    if (next.sources[key] != config::Source::kDefault) {
      store_changed |= policies_.clear_default();
      break;
    }
  if (store_changed)
    if (auto r = policies_.save(); !r)
      lg->error("SIGHUP: {} (the file's policies apply until colocd restarts)", r.error().message());

  const std::vector<broker::Uuid> devices = known_devices();
  std::vector<compute::PolicySettings> before;
  for (const broker::Uuid& d : devices) before.push_back(scheduler_.policy(d));

  const bool interval_changed = cfg_.sample_interval != next.sample_interval;
  const bool level_changed = cfg_.log_level != next.log_level;
  const bool admin_changed = cfg_.admin_group != next.admin_group;
  cfg_ = std::move(next);

  if (level_changed) log::set_level(cfg_.log_level);
  broker::BrokerConfig b = broker_.config();
  b.default_wait_timeout = cfg_.wait_timeout;
  b.admission_wait_timeout = cfg_.admission_timeout;
  b.backfill = cfg_.backfill;
  b.headroom_fraction = cfg_.headroom.fraction;
  b.headroom_bytes = cfg_.headroom.bytes;
  b.max_per_user = cfg_.max_per_user;
  broker_.reconfigure(b, now());
  if (writer_) writer_->set_retention(retention_of(cfg_));
  info_.admin_gid = admin.value();
  info_.admin_group = cfg_.admin_group;
  info_.high_priority_gid = high.value();
  info_.high_priority_group = cfg_.high_priority_group;
  if (listener_) listener_->set_limits(cfg_.max_connections_per_user, info_.admin_gid);
  if (admin_changed && info_.admin_gid)  // the reports directory's group, as at start
    if (auto r = store_.prepare(int(*info_.admin_gid)); !r) lg->warn("SIGHUP: admin_group: {}", r.error().message());
  if (interval_changed && sample_timer_.valid()) {
    itimerspec its{};
    its.it_interval.tv_sec = time_t(cfg_.sample_interval / 1000000000);
    its.it_interval.tv_nsec = long(cfg_.sample_interval % 1000000000);
    its.it_value = its.it_interval;
    if (::timerfd_settime(sample_timer_.get(), 0, &its, nullptr) != 0)
      lg->error("SIGHUP: sample_interval: timerfd_settime: {}", std::strerror(errno));
  }
  configure_policies();
  policies_.apply_all(scheduler_, devices);
  for (size_t i = 0; i < devices.size(); ++i)
    if (scheduler_.policy(devices[i]) != before[i])
      changes.push_back(fmt::format("device {} {} -> {}", devices[i].str(), policy_text(before[i]),
                                    policy_text(scheduler_.policy(devices[i]))));
  warn_unknown_devices();
  lg->info("SIGHUP: reloaded {}: {}", file, changes.empty() ? std::string("nothing changed") : fmt::format("{}", fmt::join(changes, "; ")));
  compute_dirty_ = true;
  settle();  // replies to requests the new settings let in, and the gates of changed policies
}

}  // namespace coloc::engine
