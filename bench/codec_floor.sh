#!/usr/bin/env bash
# The trunk codec end to end (issue 16 item 3's Bench): bytes read per token and s/token of
# decode with a packed trunk written by `k3 pack-trunk --codec bf16-huffman` against the same
# trunk packed without it, at the same budget, runs interleaved (plain, coded, plain, ...) so
# both see the same machine. The coded runs pass `--trunk-codec on` (decoded whatever the
# open-time probe would choose); what `auto` would choose is measured once before and after.
#   bash bench/codec_floor.sh <k3> <model_dir> <plain_trunk> <coded_trunk> <out.tsv> <mem_gb> [reps]
# Per run: the median decode step (steps after the first), the trunk and total bytes read per
# decode step (median), what the run chose (`trunk.codec` of the report) and the decode-speed
# probe's line. A summary row per trunk gives the medians over the runs.
set -eu
K3=$1 MODEL=$2 PLAIN=$3 CODED=$4 OUT=$5 GB=$6 REPS=${7:-3}
W=$(mktemp -d /tmp/codecbench.XXXX)
{
  echo "# command: bash bench/codec_floor.sh $*"
  echo "# machine: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
  echo "# date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# k3: $("$K3" --version 2>&1 | head -1)"
  du -sb "$PLAIN" "$CODED" | sed 's/^/# trunk bytes: /'
  printf 'rep\ttrunk\tcodec_used\tmem_gb\tgen\tdecode_step_median_s\ttrunk_bytes_per_step\tbytes_per_step\tdecode_tokens_per_s\tlogits_hash\n'
} > "$OUT"
# what --trunk-codec auto measures and chooses (a one-token run)
probe() {
  "$K3" "$MODEL" --trunk "$CODED" --mem-gb "$GB" --ids 1,2,3 --gen 1 --no-progress 2>&1 >/dev/null |
    grep "trunk codec" | sed "s/^/# auto probe $1: /" >> "$OUT"
}
probe before
for rep in $(seq 1 "$REPS"); do
  for t in plain coded; do
    dir=$PLAIN use=(); [ $t = coded ] && dir=$CODED use=(--trunk-codec on)
    nice "$K3" "$MODEL" --trunk "$dir" "${use[@]}" --mem-gb "$GB" --ids 1,2,3,4,5 --gen 6 \
      --no-progress --out "$W/$t-$rep.json" > /dev/null 2> "$W/$t-$rep.err"
    python3 - "$W/$t-$rep.json" "$rep" "$t" "$GB" >> "$OUT" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1])); rep, t, gb = sys.argv[2:5]
steps = r["steps"][1:]
med = lambda xs: statistics.median(xs)
codec = (r.get("trunk") or {}).get("codec")
used = codec if isinstance(codec, str) else json.dumps(codec, separators=(",", ":"))
n = len(r["generated_ids"]) - 1
print(f"{rep}\t{t}\t{used}\t{gb}\t{len(r['generated_ids'])}\t{med([s['seconds'] for s in steps]):.3f}\t"
      f"{int(med([s['trunk_bytes_read'] for s in steps]))}\t{int(med([s['bytes_read'] for s in steps]))}\t"
      f"{n / r['timing']['decode_seconds']:.4f}\t{r['logits_hash']}")
PY
    tail -1 "$OUT"
  done
done
probe after
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT"
python3 - "$OUT" >> "$OUT" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l[0].isdigit()]
by = {}
for r in rows:
    by.setdefault(r[1], []).append(r)
m = {t: (statistics.median(float(r[5]) for r in v), statistics.median(int(r[6]) for r in v),
         statistics.median(int(r[7]) for r in v)) for t, v in by.items()}
for t, (s, tb, b) in m.items():
    print(f"# median {t}: {s:.3f} s/step, trunk {tb} B/step, all {b} B/step")
if "plain" in m and "coded" in m:
    p, c = m["plain"], m["coded"]
    print(f"# coded / plain: s/step {c[0]/p[0]:.3f}, trunk bytes {c[1]/p[1]:.3f}, all bytes {c[2]/p[2]:.3f}")
hashes = {r[9] for r in rows}
print(f"# logits_hash identical across runs: {len(hashes) == 1} ({', '.join(sorted(hashes))})")
PY
tail -4 "$OUT"
rm -rf "$W"
