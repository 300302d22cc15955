#!/bin/bash
# cache_unpack.sh: the compile caches an earlier session packed (cache_pack.sh), carried as .carry/cache/*.part*,
# restored where the plan's jobs read them (/tmp/compile_cache, FlashInfer's JIT directory).
ls .carry/cache/cache.tgz.part* > /dev/null || exit 1
cat .carry/cache/cache.tgz.part* | tar xzf - -C / && du -sh /tmp/compile_cache/* 2>/dev/null
