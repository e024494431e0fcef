#!/usr/bin/env python3
"""Checks that building a subset of the workspace (`-p tarn-cli`, the README's and the
bench scripts' commands) resolves every shared dependency with the same features as
`cargo test --workspace`: a crate resolved otherwise is built again, and with it
everything above it (DataFusion, tantivy). Names each crate that differs; exit 1 if any.
The cure is `crates/tarn-workspace-hack/Cargo.toml`."""
import collections
import subprocess
import sys

# The subsets people build: the README's demo and REST host, the bench scripts, a
# library user's `-p tarn`.
SUBSETS = [
    ["tarn-cli"],
    ["tarn-rest-server"],
    ["tarn-cli", "tarn-rest-server", "tarn-benches"],
    ["tarn-rest-server", "tarn-benches"],
    ["tarn"],
]


def resolved(args, edges):
    """Each dependency's feature sets (one per build side: host and target)."""
    out = subprocess.run(
        ["cargo", "tree", "-e", edges, "--prefix", "none", "-f", "{p}|{f}"] + args,
        capture_output=True, text=True, check=True,
    ).stdout
    sets = collections.defaultdict(set)
    for line in out.splitlines():
        if "|" not in line:
            continue
        # "(*)" marks a crate shown before.
        package, features = line.replace(" (*)", "").split("|", 1)
        package = package.strip()
        if "(/" in package:  # the workspace's own crates
            continue
        sets[package].add(frozenset(f for f in features.strip().split(",") if f))
    return sets


def main():
    whole = resolved(["--workspace"], "features,normal,build,dev")
    differs = 0
    for subset in SUBSETS:
        args = [a for p in subset for a in ("-p", p)]
        # Dev-dependencies count only where tests are built: `cargo build -p …` does not.
        part = resolved(args, "features,normal,build")
        for package, sets in sorted(part.items()):
            for features in sets:
                if features not in whole.get(package, set()):
                    differs += 1
                    print(f"{' '.join(args)}: {package} with features "
                          f"{sorted(features)}; the workspace has "
                          f"{[sorted(s) for s in whole.get(package, set())]}")
    if differs:
        sys.exit(1)
    print(f"one feature set for every build ({len(SUBSETS)} subsets checked)")


if __name__ == "__main__":
    main()
