//go:build !unix

package files

const oNoFollow = 0
