"""Paged-KV book-keeping: which physical pages each batch slot owns, mirrored on the device.

Slot 0 and page 0 are reserved: padding rows of a CUDA-graph bucket run as slot 0, whose table row
maps every logical page to page 0, so their KV writes land in page 0 and their attention has one
valid key (no empty softmax rows). Pages are ref-counted so a GRPO group shares its prompt's pages.
"""
import torch


class PageTable:
    def __init__(self, num_pages: int, page_size: int, max_slots: int, max_pages_per_seq: int, device):
        assert num_pages >= 2 and max_slots >= 1
        self.num_pages, self.page_size, self.max_slots = num_pages, page_size, max_slots
        self.free_pages = list(range(num_pages - 1, 0, -1))  # pop() hands out low pages first
        self.refs = [0] * num_pages
        self.free_slots = list(range(max_slots, 0, -1))
        self.pages: list[list[int]] = [[] for _ in range(max_slots + 1)]
        # CPU mirror; rows edited here are uploaded by sync() before the next device step.
        self.table = torch.zeros(max_slots + 1, max_pages_per_seq, dtype=torch.int32)  # [S+1, W] logical -> page
        self.logical = torch.full((max_slots + 1, num_pages), -1, dtype=torch.int32)  # [S+1, N] page -> logical
        self.logical[0, 0] = 0
        self.dirty: set[int] = set()
        self.table_dev = self.table.to(device)
        self.logical_dev = self.logical.to(device)

    @property
    def pages_free(self) -> int:
        return len(self.free_pages)

    @property
    def slots_free(self) -> int:
        return len(self.free_slots)

    def pages_needed(self, num_tokens: int, slot: int = 0) -> int:
        """New pages `slot` (0 = a new sequence) needs to hold `num_tokens` tokens."""
        have = len(self.pages[slot]) if slot else 0
        return max(0, -(-num_tokens // self.page_size) - have)

    def alloc_slot(self) -> int:
        slot = self.free_slots.pop()
        assert not self.pages[slot]
        return slot

    def grow(self, slot: int, num_tokens: int) -> bool:
        """Make `slot` hold `num_tokens` tokens; False (and nothing changed) when pages run out."""
        assert slot > 0
        need = self.pages_needed(num_tokens, slot)
        if need > len(self.free_pages):
            return False
        assert len(self.pages[slot]) + need <= self.table.shape[1], "sequence longer than max_seq_len"
        for _ in range(need):
            self._append(slot, self.free_pages.pop())
        return True

    def share(self, src: int, dst: int, num_tokens: int) -> tuple[int, int] | None:
        """Give `dst` the pages of `src`'s first `num_tokens` tokens.

        Full pages are shared (ref-counted). A last partial page would be written by both, so `dst`
        gets a fresh page and the caller copies (src_page, dst_page) on the device.
        """
        assert src > 0 and dst > 0 and not self.pages[dst]
        full, partial = divmod(num_tokens, self.page_size)
        assert len(self.pages[src]) >= full + (partial > 0)
        for page in self.pages[src][:full]:
            self._append(dst, page)
        if not partial:
            return None
        assert self.free_pages, "share() needs one free page for the partial page"
        page = self.free_pages.pop()
        self._append(dst, page)
        return self.pages[src][full], page

    def free_slot(self, slot: int) -> None:
        assert slot > 0
        for page in self.pages[slot]:
            self.refs[page] -= 1
            if self.refs[page] == 0:
                self.free_pages.append(page)
            self.logical[slot, page] = -1
        self.pages[slot] = []
        self.free_slots.append(slot)
        self.dirty.add(slot)

    def _append(self, slot: int, page: int) -> None:
        assert page > 0
        idx = len(self.pages[slot])
        self.pages[slot].append(page)
        self.refs[page] += 1
        self.table[slot, idx] = page
        self.logical[slot, page] = idx
        self.dirty.add(slot)

    def sync(self) -> None:
        """Upload the rows edited since the last sync (host-side state only changes between chunks)."""
        if not self.dirty:
            return
        rows = torch.tensor(sorted(self.dirty))
        dev_rows = rows.to(self.table_dev.device)
        self.table_dev[dev_rows] = self.table[rows].to(self.table_dev.device)
        self.logical_dev[dev_rows] = self.logical[rows].to(self.logical_dev.device)
        self.dirty.clear()

    def check(self) -> None:
        """Invariants, for tests: refs match owners, free pages are unowned, padding row intact."""
        refs = [0] * self.num_pages
        for slot in range(1, self.max_slots + 1):
            for page in self.pages[slot]:
                refs[page] += 1
        assert refs == self.refs, "page ref-counts out of sync"
        assert all(refs[p] == 0 for p in self.free_pages) and len(set(self.free_pages)) == len(self.free_pages)
        assert len(self.free_pages) + sum(r > 0 for r in refs) == self.num_pages - 1
        assert int(self.table[0].abs().sum()) == 0 and int(self.logical[0, 0]) == 0
