//go:build unix

package files

import "syscall"

const oNoFollow = syscall.O_NOFOLLOW
