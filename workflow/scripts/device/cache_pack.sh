#!/bin/bash
# cache_pack.sh FIRST [COUNT]: the host's compile caches (the plan's /tmp/compile_cache: Inductor, Triton, vLLM; and
# FlashInfer's JIT directory) as one tar in 15 MiB parts, parts FIRST..FIRST+COUNT-1 (default 4: what one call may
# bring back) copied into $OUT. The tar is made once, by the first call, once the plan is DONE: a later session
# carries the parts back (cache_unpack.sh), as a host that keeps its cache directory between runs would have it.
T=/tmp/cache_tar
first=${1:?first part} count=${2:-4}
if [ ! -f $T/made ]; then
  # FORCE=1: now, while the plan still runs (the libraries write each entry whole, by a rename; the tar may miss some)
  [ "${FORCE:-0}" = 1 ] || grep -q DONE /tmp/bg.log 2>/dev/null || { echo "the plan is not DONE (FORCE=1 packs now)"; exit 1; }
  rm -rf $T && mkdir -p $T
  # vLLM's first (its start-up is the dearest), then Triton's kernels, Inductor's graphs: a tar whose last parts did
  # not come back still gives the files of the parts that did
  dirs=$(cd / && ls -d tmp/compile_cache/vllm tmp/compile_cache/triton tmp/compile_cache/inductor root/.cache/flashinfer \
    2>/dev/null)
  tar czf - -C / $dirs | split -b 15M -d -a 3 - $T/cache.tgz.part && touch $T/made
fi
ls $T | grep -c part | xargs echo parts:
du -sh /tmp/compile_cache/* /root/.cache/flashinfer 2>/dev/null
mkdir -p "$OUT/cache"
for i in $(seq "$first" $((first + count - 1))); do
  p=$(printf '%s/cache.tgz.part%03d' $T "$i"); [ -f "$p" ] && cp "$p" "$OUT/cache/"
done
ls -la "$OUT/cache"
