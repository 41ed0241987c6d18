#!/usr/bin/env bash
# Speculative decoding's verify cost (issue 15): a sweep verifying k drafted ids (k + 1 rows)
# against a one-id step, at several budgets, on a continuation that repeats its prompt (the
# forced-reply hook, so every draft is accepted and every sweep runs k + 1 rows).
#   bash bench/spec_verify.sh <k3> <model_dir> <out.tsv> [budgets...]   (budgets: resident | GB)
# Per (budget, k): the median seconds of the full sweeps (k + 1 ids, the sweep's time is on its
# first id), the median one-id step of the same budget without --spec, their ratio, and the
# run's decode tokens/s (ids after the first ÷ decode seconds) with and without speculation.
set -eu
K3=$1 MODEL=$2 OUT=$3; shift 3
BUDGETS=${*:-resident 7.4 2.78}
P=1000,2001,3002,4003,5004,6005,7006,8007,9008,10009,11010,12011
FORCE=$P,$P,$P,$P
W=$(mktemp -d /tmp/specbench.XXXX)
printf 'budget\tk\tgen\tsweep_rows\tsweep_seconds_median\tone_id_step_median\tratio\ttokens_per_second\tplain_tokens_per_second\tids_per_sweep\n' > "$OUT"
for b in $BUDGETS; do
  mem=(); [ "$b" = resident ] || mem=(--mem-gb "$b")
  for k in 0 1 2 4 8; do
    gen=$(( 3 * (k + 1) + 1 ))
    [ $k = 0 ] && gen=7
    spec=(); [ $k = 0 ] || spec=(--spec $k)
    K3_TEST_FORCE_IDS=$FORCE nice "$K3" "$MODEL" --ids $P --gen $gen "${mem[@]}" "${spec[@]}" \
      --quiet --no-progress --out "$W/r-$b-$k.json" > /dev/null
    python3 - "$W/r-$b-$k.json" "$b" "$k" "$gen" "$W/r-$b-0.json" >> "$OUT" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); b, k, gen = sys.argv[2], int(sys.argv[3]), sys.argv[4]
plain = json.load(open(sys.argv[5]))
def sweeps(rep):
    by = {}
    for s in rep["steps"]:
        by.setdefault(s["sweep"], []).append(s)
    return [v for key, v in by.items() if key > 0]
one = statistics.median(v[0]["seconds"] for v in sweeps(plain))
full = [v[0]["seconds"] for v in sweeps(r) if len(v) == k + 1]
med = statistics.median(full) if full else float("nan")
def tps(rep):
    n = len(rep["generated_ids"]) - 1
    return n / rep["timing"]["decode_seconds"]
sp = r.get("speculation") or {}
print(f"{b}\t{k}\t{gen}\t{k+1}\t{med:.4f}\t{one:.4f}\t{med/one:.3f}\t{tps(r):.4f}\t{tps(plain):.4f}\t{sp.get('ids_per_sweep', 1.0):.3f}")
PY
    tail -1 "$OUT"
  done
done
rm -rf "$W"
