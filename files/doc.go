// Package files keeps jobs' files in JetStream's object store
// (streams.FilesBucket): a job's input files, stored before the job is
// submitted and recorded in its spec, and the zip archive of what its last
// attempt produced. It also writes and reads those archives so that no
// entry name ever leaves the directory it is extracted to, and sweeps the
// files of jobs that were never submitted.
package files
