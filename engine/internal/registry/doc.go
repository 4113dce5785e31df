// Package registry is the type registry and the namespaces' settings:
// event-sourced like jobs, on the store's aggregate (their events on
// jetflow.reg.type.> and jetflow.reg.ns.>, their records in the types and
// namespaces buckets), read through a cache that a watch of the buckets
// keeps current, so that resolving a submit's type and validating its
// payload against the type's JSON Schema costs no round trip.
package registry
