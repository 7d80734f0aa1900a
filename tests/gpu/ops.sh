#!/usr/bin/env bash
# Operations on a real GPU (issue 14): `coloc doctor` against the real driver and NVML; every GPU
# nvidia-smi shows listed by `coloc status` before any job (at nvidia-smi's index); a PyTorch
# process outside coloc beside a job under coloc, seen by `coloc status --json` (pid, memory) and
# by /metrics (coloc_outside_process_memory_bytes); /metrics' `gpu` label equal to nvidia-smi's
# index for the device's UUID (the join with dcgm-exporter). Exit 77 without a GPU.
set -uo pipefail
B=${1:-build}
command -v nvidia-smi >/dev/null || exit 77
python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null || exit 77
dir=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
port=$((20000 + RANDOM % 20000))
"$B/bin/colocd" --socket "$dir/sock" --state-dir "$dir/state" --metrics-listen "127.0.0.1:$port" 2> "$dir/colocd.log" &
export COLOC_SOCKET="$dir/sock"
for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.1; done
fail=0
echo "coloc doctor (real driver):"
"$B/bin/coloc" doctor || { echo "doctor: exit $?"; fail=1; }
"$B/bin/coloc" doctor --json > "$dir/doctor.json"
# Before any job: every GPU nvidia-smi shows is in status, listed from NVML (read once a second).
sleep 2
"$B/bin/coloc" status --json > "$dir/before.json"
nvidia-smi --query-gpu=index,uuid --format=csv,noheader > "$dir/smi.csv"
python3 - "$dir" <<'PY' || fail=1
import json, sys
d = sys.argv[1]
listed = {dev["uuid"]: dev for dev in json.load(open(f"{d}/before.json"))["devices"]}
ok = True
for line in open(f"{d}/smi.csv"):
    if not line.strip(): continue
    index, uuid = (x.strip() for x in line.split(","))
    dev = listed.get(uuid)
    print(f"GPU {index} {uuid} before any job: {'listed, index ' + str(dev['index']) + ' from ' + str(dev['index_from']) if dev else 'NOT LISTED'}")
    if not dev or dev["index"] != int(index): ok = False
sys.exit(0 if ok else 1)
PY
# A job under coloc (so colocd books the device) and a process outside it holding 2 GiB.
"$B/bin/coloc" run --job ops-in -- python3 tests/gpu/torch_train.py --seconds 20 --ballast-gib 1 > /dev/null &
python3 -c 'import torch, time; x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize(); time.sleep(15)' &
outside=$!
sleep 8
"$B/bin/coloc" status
"$B/bin/coloc" status --json > "$dir/status.json"
curl -s "http://127.0.0.1:$port/metrics" > "$dir/metrics.txt" || python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode())" > "$dir/metrics.txt"
nvidia-smi --query-gpu=index,uuid --format=csv,noheader > "$dir/smi.csv"
python3 - "$dir" "$outside" <<'PY' || fail=1
import json, re, sys
d, pid = sys.argv[1], int(sys.argv[2])
status = json.load(open(f"{d}/status.json"))
smi = {u.strip(): int(i) for i, u in (l.split(",") for l in open(f"{d}/smi.csv") if l.strip())}
ok = True
procs = [p for dev in status["devices"] for p in (dev.get("outside_processes") or [])]
mine = [p for p in procs if p["pid"] == pid]
print(f"outside processes in status: {[(p['pid'], p['command'][:30], p['used_bytes']) for p in procs]}")
if not mine or mine[0]["used_bytes"] < (2 << 30):
    print(f"FAIL: pid {pid} with >= 2 GiB not listed outside coloc"); ok = False
text = open(f"{d}/metrics.txt").read()
for m in re.finditer(r'^coloc_device_info\{([^}]*)\}', text, re.M):
    labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
    want = smi.get(labels.get("UUID"))
    print(f"device {labels.get('UUID')}: gpu={labels.get('gpu')} nvidia-smi index={want} ({labels.get('index_from')})")
    if want is None or int(labels["gpu"]) != want: ok = False
if not re.search(rf'^coloc_outside_process_memory_bytes\{{[^}}]*pid="{pid}"', text, re.M):
    print("FAIL: the outside process is not in /metrics"); ok = False
sys.exit(0 if ok else 1)
PY
wait
command -v promtool >/dev/null && { promtool check metrics < "$dir/metrics.txt" || fail=1; }
exit $fail
