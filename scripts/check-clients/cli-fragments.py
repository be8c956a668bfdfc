#!/usr/bin/env python3
"""The agent-API path fragments in the Copilot CLI's code, for scripts/check-clients.sh.

The CLI's platform package (@github/copilot-linux-x64) is one Node SEA binary; its code sits in
a gzipped tar asset (copilot.tgz: cli-main.js and the native runtime.node) inside it. The
binary's own strings are scanned, then each gzipped tar found in it is opened in memory and its
.js/.node members scanned. Prints each distinct fragment under /agents, /cmc_internal or
/copilot_internal once, sorted. The URLs are assembled at run time from such fragments, so
they are reported as seen, never classified.
Usage: cli-fragments.py <the copilot binary>
"""
import io
import re
import sys
import tarfile

NEEDLE = re.compile(rb"/(?:agents|cmc_internal|copilot_internal)(?:/[A-Za-z0-9_.{}:-]+)*/?")


def tidy(fragment):
    """The binary's strings run together: keep the path-like head of a match. Source paths
    (`…/agents/x.rs`) are dropped; a segment ends at its first capital letter (the next string
    begins there), and nothing is kept after a segment that was cut or is implausibly long."""
    if ".rs" in fragment:
        return None
    out = []
    for seg in fragment.split("/")[1:]:
        head = re.split(r"[A-Z]", seg, maxsplit=1)[0]
        if len(head) > 40:
            break
        out.append(head)
        if head != seg:
            break
    return "/" + "/".join(out)


def scan(data, found):
    for m in NEEDLE.finditer(data):
        t = tidy(m.group().decode("ascii", "replace"))
        if t:
            found.add(t)


def main():
    data = open(sys.argv[1], "rb").read()
    found = set()
    scan(data, found)
    members = 0
    at = data.find(b"\x1f\x8b\x08")
    while at >= 0:
        try:
            with tarfile.open(fileobj=io.BytesIO(data[at:]), mode="r|gz") as tar:
                for m in tar:
                    if m.isfile() and m.name.endswith((".js", ".node", ".mjs", ".cjs")):
                        scan(tar.extractfile(m).read(), found)
                        members += 1
        except (tarfile.TarError, OSError, EOFError, ValueError):
            pass
        if members:
            break
        at = data.find(b"\x1f\x8b\x08", at + 1)
    if not members:
        print("# no gzipped tar asset found: the binary's own strings only", file=sys.stderr)
    for f in sorted(found):
        print(f)


if __name__ == "__main__":
    main()
