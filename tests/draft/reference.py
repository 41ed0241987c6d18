#!/usr/bin/env python3
"""Float64 reference of the DSpark draft forward (DRAFT.md §3), written from the spec alone.

Reads tests/fixtures/tiny-draft (config.json + model.safetensors) and the target's embedding
and lm_head from tests/fixtures/tiny-k3-text with numpy only, builds the context from the
fixed taps the engine's test uses, runs the block [anchor, mask, ...] through the draft in
float64 (no fp32 rounding anywhere, attention in the re-expanded form, library cos/sin/exp),
and checks tests/fixtures/tiny-draft/expected.json, which the engine's test
`draft::draft_forward_matches_the_committed_expected_values` holds the engine to bit for bit:

  * the drafted ids are equal (and each row's winning margin in the reference exceeds the
    tolerance, so the equality is not a coin toss at a near-tie);
  * every logit listed there is within TOL_ABS + TOL_REL * |logit| of the reference;
  * the confidence estimates are within 1e-6.

Tolerance: the engine stores every activation as fp32 (relative rounding 2^-24 = 6e-8) and
its latent/query rows pass through ~15 such roundings per layer over 2 layers, then a dot
over H = 32 and the Markov term; the logits are O(1..10). Measured worst difference on this
fixture is printed; the bound (1e-4 absolute + 1e-5 relative) is ~100x the fp32 rounding
budget of that chain and still far below the logit gaps that decide the ids.

Usage: python3 tests/draft/reference.py   (exit 0 when everything agrees)
"""
import json
import os
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
TOL_ABS = 1e-4
TOL_REL = 1e-5


def read_safetensors(path, names=None):
    """{name: float64 array} of a safetensors file (BF16 and F32 only)."""
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        for name, meta in header.items():
            if name == "__metadata__" or (names is not None and name not in names):
                continue
            a, b = meta["data_offsets"]
            f.seek(base + a)
            raw = f.read(b - a)
            if meta["dtype"] == "BF16":
                u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
                arr = u.view(np.float32)
            elif meta["dtype"] == "F32":
                arr = np.frombuffer(raw, dtype="<f4")
            else:
                raise SystemExit(f"{path}: {name}: unsupported dtype {meta['dtype']}")
            out[name] = arr.astype(np.float64).reshape(meta["shape"])
    return out


def target_tables():
    d = os.path.join(FIX, "tiny-k3-text")
    with open(os.path.join(d, "model.safetensors.index.json")) as f:
        wm = json.load(f)["weight_map"]
    want = ["language_model.model.embed_tokens.weight", "language_model.lm_head.weight"]
    got = {}
    for name in want:
        got.update(read_safetensors(os.path.join(d, wm[name]), {name}))
    return got[want[0]], got[want[1]]


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def yarn(cfg):
    """inv_freq, rotation factor, softmax scale (DeepSeek-V3 YaRN, DRAFT.md "RoPE")."""
    d = cfg["qk_rope_head_dim"]
    b = cfg["rope_theta"]
    extra = 1.0 / b ** (np.arange(0, d, 2, dtype=np.float64) / d)
    head = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    if not rs or rs.get("type", rs.get("rope_type")) in (None, "default"):
        return extra, 1.0, 1.0 / np.sqrt(head)
    s, L = rs["factor"], rs["original_max_position_embeddings"]
    corr = lambda n: (d * np.log(L / (n * 2 * np.pi))) / (2 * np.log(b))
    lo = max(np.floor(corr(rs.get("beta_fast", 32))), 0)
    hi = min(np.ceil(corr(rs.get("beta_slow", 1))), d - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(d // 2) - lo) / (hi - lo), 0, 1)
    keep = 1 - ramp
    inv = extra / s * (1 - keep) + extra * keep
    ms = lambda m: 0.1 * m * np.log(s) + 1 if s > 1 else 1.0
    return inv, ms(rs.get("mscale", 1)) / ms(rs.get("mscale_all_dim", 0)), ms(rs.get("mscale_all_dim", 0)) ** 2 / np.sqrt(head)


def rope(x, pos, inv, factor):
    """Interleaved pairs (x[2i], x[2i+1]) rotated by pos * inv[i]; x [..., d]."""
    ang = pos * inv
    c, s = np.cos(ang) * factor, np.sin(ang) * factor
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def taps(cfg, n):
    w = len(cfg["target_layer_ids"]) * cfg["target_hidden_size"]
    s = np.arange(n, dtype=np.int64)[:, None]
    i = np.arange(w, dtype=np.int64)[None, :]
    v = ((s * 7919 + i * 104729) % 2003).astype(np.float64) / 1001.5 - 1.0
    return v.astype(np.float32).astype(np.float64)  # the engine's taps are fp32


def silu(x):
    return x / (1.0 + np.exp(-x))


def forward(cfg, W, embed, lm_head, n_ctx, anchor):
    eps = cfg["rms_norm_eps"]
    hd, dn, dr, dv = cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    rkv = cfg["kv_lora_rank"]
    K = cfg.get("block_size", 7)
    inv, factor, sigma = yarn(cfg)
    g = lambda name: W[name] if name in W else W["model." + name]
    # 1. context rows: c = RMSNorm(W_ctx taps), per layer [lat | k_pe]
    t = taps(cfg, n_ctx)
    if cfg.get("fc_norm"):
        ht = cfg["target_hidden_size"]
        t = np.concatenate([rmsnorm(t[:, j * ht:(j + 1) * ht], g(f"fc_norm.{j}.weight"), eps)
                            for j in range(len(cfg["target_layer_ids"]))], axis=1)
    c = rmsnorm(t @ g("context_proj.weight").T, g("context_norm.weight"), eps)
    pos_ctx = np.arange(n_ctx)
    pos_blk = n_ctx + np.arange(K)
    # 2. block rows
    ids = [anchor] + [cfg["mask_token_id"]] * (K - 1)
    h = embed[ids].copy()
    for j in range(cfg["num_hidden_layers"]):
        p = f"layers.{j}."
        a = p + "self_attn."
        kva = g(a + "kv_a_proj_with_mqa.weight")

        def latent(x, pos):
            kv = x @ kva.T
            lat = rmsnorm(kv[:, :rkv], g(a + "kv_a_layernorm.weight"), eps)
            kpe = np.stack([rope(kv[r, rkv:], pos[r], inv, factor) for r in range(len(pos))])
            return lat, kpe

        lat_c, kpe_c = latent(c, pos_ctx)
        x = rmsnorm(h, g(p + "input_layernorm.weight"), eps)
        lat_b, kpe_b = latent(x, pos_blk)
        lat = np.concatenate([lat_c, lat_b])
        kpe = np.concatenate([kpe_c, kpe_b])
        q = rmsnorm(x @ g(a + "q_a_proj.weight").T, g(a + "q_a_layernorm.weight"), eps) @ g(a + "q_b_proj.weight").T
        q = q.reshape(K, hd, dn + dr)
        kvb = g(a + "kv_b_proj.weight").reshape(hd, dn + dv, rkv)
        o = np.zeros((K, hd, dv))
        for hh in range(hd):
            k_nope = lat @ kvb[hh, :dn].T  # re-expanded form
            v = lat @ kvb[hh, dn:].T
            for r in range(K):
                qp = rope(q[r, hh, dn:], pos_blk[r], inv, factor)
                sc = (k_nope @ q[r, hh, :dn] + kpe @ qp) * sigma
                if cfg.get("causal_block_attention"):
                    sc = sc[: n_ctx + r + 1]
                e = np.exp(sc - sc.max())
                pr = e / e.sum()
                o[r, hh] = pr @ v[: len(pr)]
        h = h + o.reshape(K, hd * dv) @ g(a + "o_proj.weight").T
        xm = rmsnorm(h, g(p + "post_attention_layernorm.weight"), eps)
        f = silu(xm @ g(p + "mlp.gate_proj.weight").T) * (xm @ g(p + "mlp.up_proj.weight").T)
        h = h + f @ g(p + "mlp.down_proj.weight").T
    n = rmsnorm(h, g("final_norm.weight"), eps)
    base = n @ lm_head.T
    w1, w2 = g("markov_head.markov_w1.weight"), g("markov_head.markov_w2.weight")
    cw = g("confidence_head.proj.weight")[0]
    cb = g("confidence_head.proj.bias")[0] if ("confidence_head.proj.bias" in W or "model.confidence_head.proj.bias" in W) else 0.0
    out_ids, logits, conf = [], np.zeros_like(base), []
    prev = anchor
    for r in range(K):
        e = w1[prev]
        logits[r] = base[r] + w2 @ e
        conf.append(1.0 / (1.0 + np.exp(-(cw @ np.concatenate([n[r], e]) + cb))))
        prev = int(np.argmax(logits[r]))
        out_ids.append(prev)
    return out_ids, logits, conf


def main():
    d = os.path.join(FIX, "tiny-draft")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    W = read_safetensors(os.path.join(d, "model.safetensors"))
    embed, lm_head = target_tables()
    ids, logits, conf = forward(cfg, W, embed, lm_head, exp["context_positions"], exp["anchor"])
    ok = True
    if ids != exp["ids"]:
        print(f"drafted ids differ: reference {ids}, engine {exp['ids']}")
        ok = False
    worst = 0.0
    for r, row in enumerate(exp["logits_at"]):
        top2 = np.sort(logits[r])[-2:]
        margin = top2[1] - top2[0]
        if margin <= 2 * (TOL_ABS + TOL_REL * abs(top2[1])):
            print(f"row {r}: near-tie in the reference (margin {margin:.3e}): ids cannot be compared")
            ok = False
        for i, v in row:
            diff = abs(logits[r, i] - v)
            worst = max(worst, diff)
            if diff > TOL_ABS + TOL_REL * abs(logits[r, i]):
                print(f"row {r} id {i}: engine {v!r}, reference {logits[r, i]!r} (diff {diff:.3e})")
                ok = False
    cdiff = max(abs(a - b) for a, b in zip(conf, exp["confidence"]))
    if cdiff > 1e-6:
        print(f"confidence differs by {cdiff:.3e}")
        ok = False
    print(f"draft reference: ids {ids} {'equal' if ids == exp['ids'] else 'DIFFER'}; "
          f"worst logit difference {worst:.3e} over {sum(len(r) for r in exp['logits_at'])} logits; "
          f"confidence within {cdiff:.1e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
