// tools/coloc/format.h — the CLI's tables, from the daemon's JSON answers (shapes in
// docs/ARCHITECTURE.md). Pure functions: JSON in, text out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace coloc::cli {

/// A device UUID cut to its first 12 characters and "..." (longer ones), for tables and lanes.
std::string short_uuid(const std::string& uuid);
/// "80.00 GiB"; "none" for null (no limit).
std::string bytes_text(const nlohmann::json& v);
/// "3.2 s", "1 min 04 s", "2 h 05 min".
std::string duration_text(double seconds);

/// "1.2–4.1 s" (under a minute), else "1 min 04 s – 2 min 10 s": a duration known only within bounds.
std::string duration_range_text(double lo_seconds, double hi_seconds);
/// For a report whose job ended while colocd was away: "between <ended_after> and
/// <ended_before>" (a report of an older colocd without them: "after <end>"); "" otherwise.
std::string away_span_text(const nlohmann::json& report);
/// How long a report's job ran: "1.2 s", or for a job that ended while colocd was away the range
/// "1.2–4.1 s" (`duration_s` to `duration_max_s`; "at least 1.2 s" without the latter).
std::string ran_text(const nlohmann::json& report);

/// `coloc status`: each device (its index, UUID, compute policy and whose turn it is) with
/// capacity, headroom, in use, and its jobs (state, limit, in use, weight, share of the device's
/// time); lines of at most 100 columns for job ids of up to about 20 characters. `wide`: also
/// grants, reservations, driver overhead and peaks.
std::string status_table(const nlohmann::json& status, bool wide = false);
/// `text` cut to at most `columns` terminal columns, with "..." in place of what is cut.
std::string fit_text(const std::string& text, size_t columns);
/// The processes outside coloc of one status device ("outside_processes", "outside_processes_more"):
/// a blank line, "  N processes outside coloc:", then PID, USER, DEVICE MEMORY and COMMAND, each
/// line at most `columns` wide (commands cut); "" when there are none or status does not know them.
std::string outside_processes_text(const nlohmann::json& device, size_t columns);
/// Status's "devices" array in their index order (nvidia-smi's where NVML numbers them; a device
/// without an index last), for people: the JSON lists the devices colocd's jobs met first.
nlohmann::json devices_by_index(const nlohmann::json& devices);
/// `coloc policy`: one line per device (index, UUID, policy, quantum, whose turn, and — when a
/// device has the priority policy — its target slowdown), from status' "policies"; "" when the
/// status has none (a colocd older than protocol 7).
std::string policy_table(const nlohmann::json& status);
/// `coloc policy DEVICE MODE`: what changed, from kPolicy's answer.
std::string policy_set_text(const nlohmann::json& reply);
/// "share", "timeslice, quantum 100 ms", "priority, target slowdown 5%" (from {mode, quantum_ms,
/// target_pct}).
std::string policy_text(const nlohmann::json& policy);
/// The same in a few columns, for coloc top's device line: "share", "timeslice 100ms",
/// "priority 5%".
std::string short_policy_text(const nlohmann::json& policy);
/// A job's GPU SHARE on a device: its `gpu_share` as a percentage where colocd measures it, i.e.
/// on a timesliced device (`policy.mode`); "-" elsewhere, where colocd reports 0 for every job
/// whatever it runs (docs/daemon.md: device time is tracked only while a device is timesliced).
std::string job_share_text(const nlohmann::json& dev, const nlohmann::json& job);
/// Columns `text` takes on a terminal (UTF-8 code points).
size_t display_width(const std::string& text);
/// `coloc set`: the job's new limit, priority and in-use, then one line per device whose
/// reservation the new limit touched (`reservation_changes` of the reply: raised, lowered, or kept
/// with the reason and what is available now).
std::string set_text(const nlohmann::json& reply);
/// `coloc pause` (`pause` true) or `coloc resume`: what changed, from the reply's job (as status
/// shows it) and `was` (who had paused it, or null).
std::string pause_text(const nlohmann::json& reply, bool pause);
/// `coloc suspend`'s answer: the job as colocd showed it last (its "suspension"), or why it was
/// not suspended; `started_only`: --no-wait.
std::string suspend_text(const nlohmann::json& job, bool started_only);
/// A job's STATE column: its memory state ("running", "waiting", "admission-pending"), or
/// "paused" for a running job whose launches are held ("waiting+paused" etc. otherwise), or
/// "waiting-quantum" for a running job waiting for its turn on a timesliced device
/// ("waiting+quantum" etc.).
std::string job_state_text(const nlohmann::json& job);
/// `coloc jobs`: one line per job.
std::string jobs_table(const nlohmann::json& jobs);

/// `coloc jobs --all --user U`: the uid of `user`, a name of this machine or a uid (0..2^32-2);
/// nullopt with *error ("'U': no such user") otherwise.
std::optional<uint32_t> resolve_user(const std::string& user, std::string* error);
/// `coloc jobs --all`: one line per ended job, newest first (JOB, USER, START, END, EXIT, PEAK,
/// WAITED, COMMAND; another user's command shows as "(hidden)").
std::string ended_table(const nlohmann::json& ended);
/// `coloc cancel`: what was signalled, and when SIGKILL follows.
std::string cancel_text(const nlohmann::json& reply);

// ---- the queue (a waiting request's "queue" object, docs/daemon.md "Admin answers") -----------

/// A REASON cell: "Resources", "Outside", "UserCap", "Restart", or "Priority(JOB)" / "Queue(JOB)"
/// naming the job first in line; "-" for null (not waiting).
std::string queue_reason_text(const nlohmann::json& queue);
/// An estimated start: "~14:32" (local time; "~Dec 07 14:32" past a day), "now", or "unknown";
/// "-" for null (not waiting). `now_unix_s`: the time to count from (the CLI's clock).
std::string queue_start_text(const nlohmann::json& queue, int64_t now_unix_s);
/// One sentence for a job's stderr and `coloc status`: "#1 in line: Resources: 11.60 GiB missing,
/// held by train (20.00 GiB); asks 70.00 GiB (--mem); starts ~14:32".
std::string queue_sentence(const nlohmann::json& queue, int64_t now_unix_s);
/// The bytes a refused request of a report's `oom_events` entry asked for, alone. The daemon
/// records a refused growth with `request` = what the job would have held had it been granted
/// (Grow's `need`: in-use + the request) and `in_use` = what it held; an admission carries the
/// request itself with in_use 0. So the request alone is request - in_use (request when in_use is
/// larger, which a consistent report never has).
uint64_t oom_request_bytes(const nlohmann::json& event);

/// The processes of a report by their step within the job (`processes[].step`, Register v11:
/// COLOC_STEP, a Slurm step's label), one row per step in the order the steps first registered:
/// STEP, PROCESSES (how many), PIDS (the first 8, then "+N more"), EXIT (the distinct ends: exit
/// codes, "signal N", "running", "unknown"); processes without a step are the row "-". Empty
/// when no process has a step (every job not run under Slurm, and reports of older colocds).
std::string steps_table(const nlohmann::json& report);

/// `coloc report JOB`: summary, per-device table, OOM events (REQUEST: the request alone, as
/// oom_request_bytes), launches held at the gate, compute on timesliced devices (GPU time, turns,
/// launches by gate state), waits, and the processes by step (steps_table; only when any process
/// has a step). A job that ended while colocd was away says so, with the bounds of its end and of
/// its duration.
std::string report_table(const nlohmann::json& report);

/// `coloc history`: one line per fingerprint (FINGERPRINT, USER, MODEL, RUNS, P50, P95, ESTIMATE,
/// LAST (how the last run ended), COMMAND, "(hidden)" for another user's), newest first as colocd
/// sends them; a sentence when there is none or history is off.
/// `coloc history`'s table (LAST RUN: how the last run ended); `wide`: commands not shortened.
std::string history_table(const nlohmann::json& history, bool wide = false);
/// `coloc history forget`: what went, from kHistoryForget's answer {"forgotten": N}; `what` is
/// the fingerprint or "all".
std::string history_forget_text(const nlohmann::json& reply, const std::string& what);

}  // namespace coloc::cli
