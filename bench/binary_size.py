#!/usr/bin/env python3
"""Bytes per module of the static k3 binary, from GNU ld link maps (bench/README.md, "Binary size").

    python3 bench/binary_size.py OUT.tsv LABEL=BINARY:MAP [LABEL=BINARY:MAP ...]

Each MAP comes from the musl release build of .ci/run's `static_binary` with two flags added
that do not change the binary's bytes (the map is a side file; the symbols are stripped):
`-C link-arg=-Wl,-Map=MAP` and `-C symbol-mangling-version=v0`, whose symbol names carry the
generic arguments, so a generic instantiation (a sort, a drop, a closure) is counted in the
module of the first k3 type or function it names. See bench/binary_size.sh.

Rows: input sections of .text, .rodata, .eh_frame, .gcc_except_table and .data, grouped by
module (`k3::cli`, `k3_kernels`, std's panic backtrace machinery, musl, ...); anonymous
constants (string literals, tables LLVM merged) and .eh_frame cannot be attributed and have
rows of their own. One column per LABEL, then the change from the first to the last.
"""
import collections
import os
import re
import subprocess
import sys

SECTIONS = {".text", ".rodata", ".eh_frame", ".gcc_except_table", ".data", ".data.rel.ro", ".tdata", ".init_array"}
PREFIXES = (".text.unlikely.", ".text.hot.", ".text.startup.", ".text.", ".rodata.", ".data.rel.ro.", ".data.rel.", ".data.", ".tdata.")
# std's panic-message backtrace: symbolisation (gimli, addr2line, rustc-demangle, miniz_oxide) and
# the unwinder. Linked by std's panic hook whatever the program does; not removable on stable.
BACKTRACE = ("std::backtrace", "gimli", "addr2line", "rustc_demangle", "miniz_oxide", "adler2", "object")


def read_map(path):
    """(output section, input section, size, object file) of every input section."""
    lines = open(path).read().split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith("Linker script and memory map"))
    out_re = re.compile(r"^(\.[\w.]+)(\s|$)")
    in_re = re.compile(r"^ (\.\S+)\s*(?:(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(.*))?$")
    cont_re = re.compile(r"^\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(.*)$")
    fill_re = re.compile(r"^ \*fill\*\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)")
    items, sec, pending = [], None, None
    for l in lines[start:]:
        m = out_re.match(l)
        if m:
            sec, pending = m.group(1), None
            continue
        m = fill_re.match(l)
        if m:
            items.append((sec, "*fill*", int(m.group(1), 16), ""))
            continue
        m = in_re.match(l)
        if m:
            if m.group(2):
                items.append((sec, m.group(1), int(m.group(3), 16), m.group(4)))
                pending = None
            else:
                pending = m.group(1)
            continue
        if pending:
            m = cont_re.match(l)
            if m:
                items.append((sec, pending, int(m.group(2), 16), m.group(3)))
            pending = None
    return [x for x in items if x[0] in SECTIONS and x[2] > 0]


def symbol(section):
    for p in PREFIXES:
        if section.startswith(p):
            return section[len(p):]
    return section


def module(name, obj, section, out_section):
    base = os.path.basename(obj)
    if "libc.a" in obj or base.startswith("crt") or base.startswith("rcrt"):
        return "musl libc (C)"
    if "libunwind" in obj:
        return "std: panic backtrace (symbolise, unwind)"
    if section == "*fill*":
        return "(alignment fill)"
    if out_section == ".eh_frame":
        return "(.eh_frame: unwind tables, all code)"
    m = re.search(r"\bk3::(\w+)", name)
    if m:
        return "k3::" + m.group(1)
    if re.search(r"\bk3_kernels::", name):
        return "k3_kernels"
    if name.startswith(".Lanon") or name.startswith("str1") or name.startswith("cst") or ".Lanon" in name:
        return "(anonymous constants: strings, panic locations, tables)"
    if any(re.search(r"\b" + b, name) for b in BACKTRACE):
        return "std: panic backtrace (symbolise, unwind)"
    if re.search(r"\bmemchr::", name):
        return "memchr"
    m = re.search(r"\b(std|core|alloc|hashbrown|std_detect)::", name)
    if m:
        return {"std": "std (other)", "std_detect": "std (other)", "hashbrown": "std (other)"}.get(m.group(1), m.group(1) + " (generic code not naming k3)")
    return "(other)"


def measure(map_path):
    items = read_map(map_path)
    names = subprocess.run(["c++filt"], input="\n".join(symbol(x[1]) for x in items), capture_output=True, text=True, check=True).stdout.split("\n")
    by = collections.Counter()
    for (osec, sec, size, obj), name in zip(items, names):
        name = re.sub(r"\[[0-9a-f]{1,16}\]", "", name)
        by[module(name, obj, sec, osec)] += size
    return by


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    cols = []
    for s in specs:
        label, rest = s.split("=", 1)
        binary, map_path = rest.split(":", 1)
        cols.append((label, os.path.getsize(binary), measure(map_path)))
    rows = sorted(set().union(*(c[2] for c in cols)), key=lambda m: -cols[-1][2].get(m, 0))
    with open(out, "w") as f:
        f.write("module\t" + "\t".join(c[0] for c in cols) + "\tchange\n")
        for r in rows:
            v = [c[2].get(r, 0) for c in cols]
            f.write(r + "\t" + "\t".join(map(str, v)) + f"\t{v[-1] - v[0]:+d}\n")
        v = [sum(c[2].values()) for c in cols]
        f.write("(sum of the rows: loaded sections)\t" + "\t".join(map(str, v)) + f"\t{v[-1] - v[0]:+d}\n")
        v = [c[1] for c in cols]
        f.write("(file size, bytes)\t" + "\t".join(map(str, v)) + f"\t{v[-1] - v[0]:+d}\n")


if __name__ == "__main__":
    main()
