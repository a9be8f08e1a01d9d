// The trampoline footprint_darwin.go calls proc_pid_rusage through (the
// pattern of golang.org/x/sys/unix's zsyscall_darwin_*.s; the same text
// assembles on amd64 and arm64).

#include "textflag.h"

TEXT libc_proc_pid_rusage_trampoline<>(SB),NOSPLIT,$0-0
	JMP	libc_proc_pid_rusage(SB)
GLOBL	·libc_proc_pid_rusage_trampoline_addr(SB), RODATA, $8
DATA	·libc_proc_pid_rusage_trampoline_addr(SB)/8, $libc_proc_pid_rusage_trampoline<>(SB)
