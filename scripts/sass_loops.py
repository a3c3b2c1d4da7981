#!/usr/bin/env python3
"""The loops of a kernel file's machine code, from nvdisasm's control-flow graph (scripts/sass.sh with
SASS_LOOPS=1 runs it; no GPU needed).

    sass_loops.py GRAPH.dot [REGEX]

GRAPH.dot is `nvdisasm -bbcfg -poff` output: one node per basic block, its instructions with their
offsets, and the edges between blocks. A loop is an edge back to a block at or before its source (its
head); its body is every block whose first instruction lies between the head and the source. For each
loop that multiplies on the Tensor Cores (HMMA or HGMMA) in a kernel whose mangled name matches REGEX,
one line: the kernel, the loop's offsets, its instructions and the kinds that tell where a K step's
work goes. The counts are static, one trip through every block of the body: a branch that skips a
block in practice (a predicated-off load at an edge) still counts it, so the count is an upper bound
on what one trip issues per thread, and it is exact for a body without branches. Why this and not the
whole kernel's count (sass.sh's summary line): the K loop is what runs hundreds of times per block.
"""
import re
import sys
from collections import Counter

# What each column counts: a Tensor Core product, a global load, a shared store, a shared load into
# fragments, a division's reciprocal (an integer division by a run-time value compiles to one), a branch.
# An opcode is matched on its name before the first dot (LDG.E.U16 is an LDG, LDGSTS is not), except
# MUFU.RCP, whose name is MUFU.
KINDS = ["HMMA", "HGMMA", "LDG", "STS", "LDSM", "MUFU.RCP", "BRA"]


def is_kind(op, kind):
    return op.startswith(kind + ".") or op == kind if "." in kind else op.split(".")[0] == kind


def blocks_of(cluster):
    """{node name: (first offset, last offset, [instructions])} of one function's graph."""
    nodes = {}
    for m in re.finditer(r'^"([^"]+)"\s*\n?\[label="(.*?)"\]', cluster, re.M | re.S):
        pairs = re.findall(r'(?:\{<entry>|\\l|\|<exit\d+>)([0-9a-f]{4,}):((?:\\ |[^\\])*)', m.group(2))
        if pairs:
            offsets = [int(a, 16) for a, _ in pairs]
            nodes[m.group(1)] = (min(offsets), max(offsets), [b.replace("\\ ", " ").strip() for _, b in pairs])
    return nodes


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: sass_loops.py GRAPH.dot [REGEX]   (GRAPH.dot: nvdisasm -bbcfg -poff output)")
    text = open(sys.argv[1]).read()
    regex = re.compile(sys.argv[2] if len(sys.argv) == 3 else ".")
    found = 0
    for cluster in re.split(r'\nsubgraph "cluster_', text)[1:]:
        kernel = cluster.split('"', 1)[0]
        if not regex.search(kernel):
            continue
        nodes = blocks_of(cluster)
        seen = set()
        for src, dst in re.findall(r'^"([^"]+)"(?::\w+)*\s*->\s*"([^"]+)"', cluster, re.M):
            if src not in nodes or dst not in nodes or nodes[dst][0] > nodes[src][0]:
                continue
            head, tail = nodes[dst][0], nodes[src][1]
            if (head, tail) in seen:
                continue
            seen.add((head, tail))
            body = [i for first, _, instrs in nodes.values() if head <= first <= tail for i in instrs]
            count = Counter()
            for instr in body:
                op = re.sub(r"^@!?U?P\w+\s+", "", instr).split()[0] if instr.split() else ""
                for kind in KINDS:
                    count[kind] += is_kind(op, kind)
            if count["HMMA"] + count["HGMMA"] == 0:
                continue
            found += 1
            kinds = ", ".join(f"{count[kind]} {kind}" for kind in KINDS)
            print(f"{len(body):5d} instructions in loop {head:#06x}-{tail:#06x} ({kinds})  {kernel}")
    if found == 0:
        print("no Tensor Core loop in a kernel matching", regex.pattern)


if __name__ == "__main__":
    main()
