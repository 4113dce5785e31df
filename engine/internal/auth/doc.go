// Package auth is who may do what: the access tokens (event-sourced on the
// store's aggregate, checked through a watch-fed cache), the checks of a
// request's references against its principal's namespace, and the NATS
// users and permissions of each role. The rules themselves (roles,
// actions, what a principal sees) are package commands'.
package auth
