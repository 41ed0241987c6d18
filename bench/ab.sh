#!/usr/bin/env bash
# Two k3 binaries run alternately (a, b, a, b, ...) on the same prompt and flags, so both see
# the same machine and disk: s/token, each kind's read seconds and bytes, and the logits hash
# of every run, one row each, plus the medians.
#   bash bench/ab.sh <k3_a> <k3_b> <model_dir> <out.tsv> <pairs> [k3 flags...]
# e.g. bash bench/ab.sh /tmp/k3-old target/release/k3 /work/synth-k3 out.tsv 4 --mem-gb 2.37
set -eu
A=$1 B=$2 MODEL=$3 OUT=$4 PAIRS=$5
shift 5
W=$(mktemp -d /tmp/k3ab.XXXX)
{
  echo "# command: bash bench/ab.sh $A $B $MODEL $OUT $PAIRS $*"
  echo "# run: k3 MODEL --ids 1,2,3,4,5 --gen 6 --threads 2 --prefill-chunk 64 --no-progress --out R.json $*"
  echo "# machine: $(uname -srm), $(nproc) cores; date_utc $(date -u +%Y-%m-%dT%H:%M:%SZ); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# a: $("$A" --version 2>&1 | head -1)"
  echo "# b: $("$B" --version 2>&1 | head -1)"
  printf 'pair\tbinary\ts_per_token\texpert_read_s\ttrunk_read_s\ttrunk_wait_s\ttable_read_s\tbytes_read\tlogits_hash\n'
} > "$OUT"
for p in $(seq 1 "$PAIRS"); do
  for which in a b; do
    bin=$A
    [ "$which" = b ] && bin=$B
    "$bin" "$MODEL" --ids 1,2,3,4,5 --gen 6 --threads 2 --prefill-chunk 64 --no-progress \
      --out "$W/r.json" "$@" > /dev/null 2> "$W/err" || { cat "$W/err" >&2; exit 1; }
    python3 - "$W/r.json" "$p" "$which" >> "$OUT" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t, ec, tr, io = r["timing"], r["expert_cache"], r["trunk"], r["io"]
total = ec["bytes_read"] + tr["bytes_read"] + io["lm_head_bytes_read"] + io["embedding_bytes_read"]
print("\t".join(str(x) for x in [sys.argv[2], sys.argv[3], round(t["seconds_per_token"], 4),
    round(ec["read_seconds"], 3), round(tr["read_seconds"], 3), round(tr["wait_seconds"], 3),
    round(io["model_table_read_seconds"], 3), total, r["logits_hash"]]))
EOF
  done
done
python3 - "$OUT" >> "$OUT" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l[0].isdigit()]
for which in "ab":
    s = [float(r[2]) for r in rows if r[1] == which]
    print(f"# median {which}: {statistics.median(s):.3f} s/token over {len(s)} runs [{min(s):.3f}, {max(s):.3f}]")
print(f"# logits_hash identical across runs: {len({r[8] for r in rows}) == 1}")
EOF
rm -rf "$W"
tail -3 "$OUT"
