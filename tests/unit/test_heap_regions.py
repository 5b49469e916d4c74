"""glibc's heaps read from a maps text (``probes.heaps.heap_regions``, ``header_agrees``): the
main heap, thread heaps in the shape ``new_heap`` gives them, and what is not a heap."""

from __future__ import annotations

from trainguard.probes.heaps import HEAP_MAX_BYTES, HeapRegion, header_agrees, heap_regions

MIB = 1024 * 1024
A = 0x7F52_0000_0000  # a multiple of 64 MiB


def _line(start: int, end: int, perms: str = "rw-p", path: str = "", inode: str = "0") -> str:
    return f"{start:x}-{end:x} {perms} 00000000 00:00 {inode}" + (f"      {path}" if path else "")


def test_main_heap_and_thread_heaps_with_their_reserve() -> None:
    maps = "\n".join(
        [
            _line(0x5598_D634_1000, 0x5598_DE06_D000, path="[heap]"),
            _line(A, A + 3 * MIB),  # a thread heap: its read-write part ...
            _line(A + 3 * MIB, A + HEAP_MAX_BYTES, perms="---p"),  # ... and its reserve to the boundary
            _line(A + HEAP_MAX_BYTES, A + 2 * HEAP_MAX_BYTES),  # a heap grown to the whole 64 MiB
        ]
    )
    regions = heap_regions(maps)
    assert regions == [
        HeapRegion(0x5598_D634_1000, 0x5598_DE06_D000, True),
        HeapRegion(A, A + 3 * MIB, False),
        HeapRegion(A + HEAP_MAX_BYTES, A + 2 * HEAP_MAX_BYTES, False),
    ]


def test_what_is_not_a_heap() -> None:
    maps = "\n".join(
        [
            _line(A + 4096, A + 2 * MIB),  # not on a 64 MiB boundary (a plain mmap)
            _line(A + HEAP_MAX_BYTES, A + HEAP_MAX_BYTES + MIB, path="/usr/lib/libfoo.so", inode="1234"),
            _line(2 * A, 2 * A + MIB),  # aligned, but followed by nothing that reserves the rest
            _line(2 * A + MIB, 2 * A + 5 * MIB),  # read-write, not a PROT_NONE reserve
            _line(3 * A, 3 * A + MIB, perms="r--p"),  # not writable
            _line(4 * A, 4 * A + HEAP_MAX_BYTES + MIB),  # past the boundary (merged with a neighbour)
            "garbage line",
        ]
    )
    assert heap_regions(maps) == []


def test_header_must_fit_its_mapping_and_name_a_heap_as_its_arena() -> None:
    region = HeapRegion(A, A + 3 * MIB, False)
    starts = {A}
    first_heap = (A + 32, 0, 2 * MIB, 3 * MIB)  # ar_ptr just past heap_info: the arena's first heap
    assert header_agrees(region, first_heap, starts, 4096)
    assert header_agrees(
        region, (A + 32, 0, 4 * MIB, 4 * MIB), starts, 4096
    )  # grown since the maps were read
    assert not header_agrees(region, (A + 32, 0, 2 * MIB, 65 * MIB), starts, 4096)  # past a heap's size
    assert not header_agrees(region, (A + 32, 0, 2 * MIB, 3 * MIB + 100), starts, 4096)  # not in pages
    assert not header_agrees(region, (A + 32, 0, 4 * MIB, 3 * MIB), starts, 4096)  # size past mprotect_size
    assert not header_agrees(region, (0x1234, 0, 2 * MIB, 3 * MIB), starts, 4096)  # arena in no heap
    assert not header_agrees(region, (A + 32, 0, 0, 3 * MIB), starts, 4096)
