"""The Windows tier: one Job Object per worker (Win32 through ctypes), and GPU memory from PDH.

Written against the documented Win32 API; it has not run on this project's Linux machines (its
tests are marked ``windows`` and run in the hosted CI's Windows job).

- **Membership**: the job's process list (``JobObjectBasicProcessIdList``): every process the
  worker starts joins its job, however it detaches (exact).
- **Memory cap**: ``JOB_OBJECT_LIMIT_JOB_MEMORY`` makes the OS refuse the job's commits above the
  limit (exact, enforced by the OS; the allocation fails inside the worker rather than a kill).
- **Peak**: ``PeakJobMemoryUsed`` of ``JOBOBJECT_EXTENDED_LIMIT_INFORMATION`` (exact, committed).
- **Kill**: ``TerminateJobObject``; ``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`` also ends the job when
  its last handle closes, so a supervisor that dies takes its workers with it.
- **Start**: the worker is created suspended, assigned to its job, then resumed
  (``NtResumeProcess``), so nothing it starts can escape before it is a member (as Ray's
  ``set_kill_child_on_death_win32`` does).
- **GPU per process**: NVML has no per-process figures under WDDM; the PDH counter
  ``\\GPU Process Memory(pid_<PID>_*)\\Dedicated Usage`` has them.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any

__all__ = ["JobObject", "WindowsTree", "gpu_dedicated_bytes", "CREATE_SUSPENDED", "JOB_LIMIT_FLAGS"]

CREATE_SUSPENDED = 0x00000004
CREATE_NEW_PROCESS_GROUP = 0x00000200
_JOB_OBJECT_LIMIT_JOB_MEMORY = 0x00000200
_JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
_JobObjectBasicProcessIdList = 3
_JobObjectExtendedLimitInformation = 9
_PROCESS_SET_QUOTA = 0x0100
_PROCESS_TERMINATE = 0x0001
_PROCESS_SUSPEND_RESUME = 0x0800
_PDH_FMT_LARGE = 0x00000400
_PDH_MORE_DATA = 0x800007D2


def JOB_LIMIT_FLAGS(memory_limit_bytes: int | None) -> int:  # noqa: N802 - the Win32 flag word
    """The job's limit flags: kill on close always, the job memory cap when a limit is given."""
    flags = _JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    if memory_limit_bytes:
        flags |= _JOB_OBJECT_LIMIT_JOB_MEMORY
    return flags


class _IoCounters(ctypes.Structure):
    # IO_COUNTERS: Read/Write/OtherOperationCount, then Read/Write/OtherTransferCount
    _fields_ = [
        (f"{op}{what}Count", ctypes.c_ulonglong)
        for what in ("Operation", "Transfer")
        for op in ("Read", "Write", "Other")
    ]


class _BasicLimit(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_longlong),
        ("PerJobUserTimeLimit", ctypes.c_longlong),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class ExtendedLimit(ctypes.Structure):
    """``JOBOBJECT_EXTENDED_LIMIT_INFORMATION``."""

    _fields_ = [
        ("BasicLimitInformation", _BasicLimit),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


def _api() -> Any:
    if sys.platform != "win32":
        raise OSError("Job Objects exist only on Windows")
    return ctypes.WinDLL("kernel32", use_last_error=True)


class JobObject:
    """A Job Object that kills its processes when closed, optionally with a memory cap."""

    def __init__(self, memory_limit_bytes: int | None = None) -> None:
        self._k32 = _api()
        self._k32.CreateJobObjectW.restype = ctypes.c_void_p
        handle = self._k32.CreateJobObjectW(None, None)
        if not handle:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
        self.handle = ctypes.c_void_p(handle)
        info = ExtendedLimit()
        info.BasicLimitInformation.LimitFlags = JOB_LIMIT_FLAGS(memory_limit_bytes)
        if memory_limit_bytes:
            info.JobMemoryLimit = int(memory_limit_bytes)
        if not self._k32.SetInformationJobObject(
            self.handle, _JobObjectExtendedLimitInformation, ctypes.byref(info), ctypes.sizeof(info)
        ):
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
        self._lock = threading.Lock()
        self._closed = False

    def assign_and_resume(self, pid: int) -> None:
        """Make the (suspended) process ``pid`` a member, then let it run."""
        self._k32.OpenProcess.restype = ctypes.c_void_p
        process = self._k32.OpenProcess(
            _PROCESS_SET_QUOTA | _PROCESS_TERMINATE | _PROCESS_SUSPEND_RESUME, False, pid
        )
        if not process:
            raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
        try:
            if not self._k32.AssignProcessToJobObject(self.handle, ctypes.c_void_p(process)):
                raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
            ntdll = ctypes.WinDLL("ntdll")  # type: ignore[attr-defined]
            ntdll.NtResumeProcess(ctypes.c_void_p(process))
        finally:
            self._k32.CloseHandle(ctypes.c_void_p(process))

    def pids(self) -> list[int]:
        """The job's member processes."""
        count = 1024

        class _List(ctypes.Structure):
            _fields_ = [
                ("NumberOfAssignedProcesses", ctypes.c_uint32),
                ("NumberOfProcessIdsInList", ctypes.c_uint32),
                ("ProcessIdList", ctypes.c_size_t * count),
            ]

        data = _List()
        ok = self._k32.QueryInformationJobObject(
            self.handle, _JobObjectBasicProcessIdList, ctypes.byref(data), ctypes.sizeof(data), None
        )
        if not ok:
            return []
        return [int(data.ProcessIdList[i]) for i in range(data.NumberOfProcessIdsInList)]

    def peak_bytes(self) -> int | None:
        """``PeakJobMemoryUsed``: the most memory the job's processes committed together."""
        info = ExtendedLimit()
        ok = self._k32.QueryInformationJobObject(
            self.handle, _JobObjectExtendedLimitInformation, ctypes.byref(info), ctypes.sizeof(info), None
        )
        return int(info.PeakJobMemoryUsed) if ok else None

    def kill(self, exit_code: int = 137) -> None:
        with self._lock:
            if not self._closed:
                self._k32.TerminateJobObject(self.handle, exit_code)

    def close(self) -> None:
        """Close the handle: with kill-on-close, whatever is left in the job ends (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._k32.CloseHandle(self.handle)


class WindowsTree:
    """A worker's tree as its Job Object sees it (the ``ProcessTree`` surface)."""

    cgroup = None

    def __init__(self, root_pid: int, job: JobObject) -> None:
        self.root_pid = root_pid
        self.job = job

    def pids(self) -> tuple[int, ...]:
        return tuple(self.job.pids()) or (self.root_pid,)

    def read(self, *, uss: bool = False, rediscover: bool = False) -> tuple[int, int | None] | None:
        import psutil

        members = self.job.pids()
        if self.root_pid not in members:
            return None
        rss, uss_total = 0, 0
        for pid in members:
            try:
                proc = psutil.Process(pid)
                info = proc.memory_full_info() if uss else proc.memory_info()
                rss += int(info.rss)
                uss_total += int(getattr(info, "uss", 0))
            except psutil.Error:
                continue
        return rss, (uss_total if uss else None)

    def peak_bytes(self) -> int | None:
        return self.job.peak_bytes()

    def kill(self, *, started_after: float | None = None) -> list[int]:
        members = self.job.pids()
        self.job.kill()
        return members

    def end_leftovers(self) -> list[int]:
        members = self.job.pids()
        self.job.kill()
        return members

    def close(self) -> None:
        self.job.close()


def gpu_dedicated_bytes(pid: int) -> int | None:
    """Dedicated GPU memory of ``pid`` summed over adapters, from the PDH counter
    ``\\GPU Process Memory(pid_<PID>_*)\\Dedicated Usage``; None where it cannot be read."""
    if sys.platform != "win32":
        return None
    pdh = ctypes.WinDLL("pdh")
    query = ctypes.c_void_p()
    if pdh.PdhOpenQueryW(None, None, ctypes.byref(query)) != 0:
        return None
    try:
        counter = ctypes.c_void_p()
        path = f"\\GPU Process Memory(pid_{pid}_*)\\Dedicated Usage"
        if pdh.PdhAddEnglishCounterW(query, path, None, ctypes.byref(counter)) != 0:
            return None
        if pdh.PdhCollectQueryData(query) != 0:
            return None

        class _Value(ctypes.Structure):
            _fields_ = [("CStatus", ctypes.c_uint32), ("largeValue", ctypes.c_longlong)]

        class _Item(ctypes.Structure):
            _fields_ = [("szName", ctypes.c_wchar_p), ("FmtValue", _Value)]

        size, count = ctypes.c_uint32(0), ctypes.c_uint32(0)
        status = pdh.PdhGetFormattedCounterArrayW(
            counter, _PDH_FMT_LARGE, ctypes.byref(size), ctypes.byref(count), None
        )
        if status != _PDH_MORE_DATA or size.value == 0:
            return 0 if status == 0 else None
        buffer = (ctypes.c_byte * size.value)()
        if (
            pdh.PdhGetFormattedCounterArrayW(
                counter, _PDH_FMT_LARGE, ctypes.byref(size), ctypes.byref(count), buffer
            )
            != 0
        ):
            return None
        items = ctypes.cast(buffer, ctypes.POINTER(_Item))
        return sum(int(items[i].FmtValue.largeValue) for i in range(count.value))
    finally:
        pdh.PdhCloseQuery(query)
