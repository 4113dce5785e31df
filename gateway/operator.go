package gateway

import (
	"net/http"

	"github.com/jetflow/jetflow/commands"
)

// The operator's routes: charts (stats series), failures, search, bulk
// actions, a fan-out's pieces. Their handlers are in charts.go,
// failures.go, bulk.go and pieces.go.

// operatorRoutes registers the operator's API routes under v1.
func (g *Gateway) operatorRoutes(mux *http.ServeMux, v1 string) {
	read := commands.ActRead
	route(mux, v1+"/stats/series", methods{"GET": g.act(read, g.statsSeries)})
}

// operatorPages registers the operator's dashboard pages.
func (g *Gateway) operatorPages(mux *http.ServeMux) {
	read := commands.ActRead
	route(mux, "/overview", methods{"GET": g.act(read, g.pageOverview)})
	route(mux, "/queues/{queue}", methods{"GET": g.act(read, g.pageQueue)})
}
