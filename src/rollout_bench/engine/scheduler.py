"""Continuous batching: admit waiting groups while slots and pages allow; preempt the newest when
the running sequences' next decode chunk needs pages that are not there (it is recomputed later);
choose each decode chunk's length.

A group is the n completions of one prompt: admitted together, prefilled once, pages shared.
"""
import bisect
from collections import deque

from .config import EngineConfig
from .page_table import PageTable
from .sequence import Sequence


class Scheduler:
    def __init__(self, cfg: EngineConfig, pages: PageTable):
        self.cfg, self.pages = cfg, pages
        self.waiting: deque[list[Sequence]] = deque()
        self.running: list[Sequence] = []
        self.copies: list[tuple[int, int]] = []  # (src, dst) partial pages to copy after the prefill
        self.admissions = 0
        self.preemptions = 0

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, group: list[Sequence]) -> None:
        assert 1 <= len(group) <= self.cfg.max_batch, "a group must fit in the batch"
        self.waiting.append(group)

    def chunk_cap(self, seqs) -> int:
        """Steps the next decode chunk may run for `seqs`: longer when none of them can stop at EOS."""
        return self.cfg.chunk_cap(any(s.eos_token_id is not None for s in seqs))

    def _group_pages(self, group: list[Sequence]) -> tuple[int, int]:
        """(pages taken at admission, pages for the first decode chunk) of a group: its prompt once,
        a private copy of the partial last page per extra member, then every member's growth."""
        P, L = self.cfg.page_size, group[0].num_tokens
        prompt = -(-L // P)
        chunk = min(self.chunk_cap(group), max(s.remaining for s in group))  # members may have budgets of their own
        grow = -(-(L + chunk) // P) - prompt
        return prompt + (len(group) - 1) * (L % P > 0), len(group) * grow

    def room(self, seq: Sequence) -> int:
        """Decode steps `seq` can run before its positions leave max_seq_len (the RoPE table, the page table
        row): past its budget too, which a chunk may run it (chunk_len). At least remaining + 1 (Engine.submit)."""
        return self.cfg.max_seq_len + 1 - seq.num_tokens

    def _growth(self) -> int:
        """Pages the running sequences need for their next full chunk (a row may run it past its budget)."""
        chunk = self.chunk_cap(self.running)
        return sum(self.pages.pages_needed(s.num_tokens - 1 + min(chunk, self.room(s)), s.slot)
                   for s in self.running)

    def chunk_len(self, limit: int) -> int:
        """Steps of the next decode chunk, at most `limit`. A row whose budget ends inside the chunk decodes on to
        its end and the tokens past its budget are dropped, as past an EOS (its draws are keyed by position,
        sampler.request_seed, so the kept tokens do not depend on the chunking). The chunk stops early, where
        budgets end, only if the rows finished by then would otherwise idle for more row-steps than a host sync
        costs (cfg.decode_sync_row_steps): cutting every chunk at the nearest budget made a GRPO rollout's
        ragged lengths (64 prompts x 8, config/traces/) sync with the host every 2.3 steps
        (h100-2026-12-05-headline). While a group waits for slots, the chunk ends where enough rows have finished
        to admit it."""
        rem = sorted(s.remaining for s in self.running)  # [n]
        end = min(self.chunk_cap(self.running), limit, rem[-1], min(map(self.room, self.running)))
        if self.waiting:
            short = len(self.waiting[0]) - self.pages.slots_free  # rows that must finish before it fits
            if 0 < short <= len(rem):
                end = min(end, rem[short - 1])
        # stopping at c spares the rows done by then (bisect_right) the steps from c to the end
        saved, c = max(((bisect.bisect_right(rem, c) * (end - c), c) for c in set(rem) if c < end), default=(0, end))
        return c if saved > self.cfg.decode_sync_row_steps else end

    def admit(self) -> list[list[Sequence]]:
        """Take waiting groups into the batch; reserve their prompt pages and share them in-group."""
        admitted, budget = [], self.cfg.max_prefill_tokens
        demand = self._growth()
        while self.waiting:
            group = self.waiting[0]
            L = group[0].num_tokens
            now, grow = self._group_pages(group)
            need = now + grow
            if admitted and L > budget:
                break
            if len(group) > self.pages.slots_free or need + demand > self.pages.pages_free:
                if not self.running and not admitted:
                    raise RuntimeError(
                        f"KV pool too small: a group of {len(group)} x {L} tokens needs {need} pages, "
                        f"{self.pages.pages_free} free; raise num_pages / kv_memory_gb")
                break
            self.waiting.popleft()
            leader = group[0]
            for seq in group:
                seq.slot = self.pages.alloc_slot()
                seq.admitted = self.admissions
                self.admissions += 1
            assert self.pages.grow(leader.slot, L)
            for seq in group[1:]:
                copy = self.pages.share(leader.slot, seq.slot, L)
                if copy:
                    self.copies.append(copy)
            demand += grow
            budget -= L
            admitted.append(group)
            self.running.extend(group)
        return admitted

    def reserve(self, chunk: int) -> list[Sequence]:
        """Give every running sequence pages for `chunk` more steps, preempting the newest as needed."""
        preempted = []
        for seq in sorted(self.running, key=lambda s: s.admitted):
            if seq.slot == 0:  # preempted in this loop
                continue
            while not self.pages.grow(seq.slot, seq.num_tokens - 1 + chunk):
                victim = max(self.running, key=lambda s: s.admitted)
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
        return preempted

    def _preempt(self, seq: Sequence) -> None:
        """Drop its KV; it goes back to the head of the queue and is recomputed from its tokens."""
        self.pages.free_slot(seq.slot)
        seq.slot = 0
        self.running.remove(seq)
        self.waiting.appendleft([seq])
        self.preemptions += 1

    def finish(self, seqs: list[Sequence]) -> None:
        for seq in seqs:
            assert seq.finished
            self.pages.free_slot(seq.slot)
            seq.slot = 0
            self.running.remove(seq)
