package gateway

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/jetflow/jetflow/projections"
)

// GET /schedules (the dashboard): the schedules of the page's namespace
// (every one's without), each with its next run and last runs; app.js
// keeps them live from GET /api/v1/schedules's stream and pauses and
// resumes them.
func (g *Gateway) pageSchedules(w http.ResponseWriter, r *http.Request) {
	ns, err := pageNamespace(r)
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadRequest
	}
	views := []*projections.ScheduleView{}
	if err == nil {
		recs, lerr := g.store.Schedules.List(r.Context(), ns)
		if lerr != nil {
			err, status = lerr, http.StatusServiceUnavailable
		}
		for _, rec := range recs {
			views = append(views, projections.ViewSchedule(rec))
		}
	}
	d := map[string]any{"Schedules": views, "Error": "", "Namespace": ns}
	if err != nil {
		d["Error"] = problemOf(err).Detail
	}
	g.render(w, r, status, "schedules", "Schedules", d)
}

// scheduleTiming is a schedule's cron expression and zone, or interval,
// as the dashboard shows it (app.js's timing is the same).
func scheduleTiming(v *projections.ScheduleView) string {
	if v.Cron == "" {
		if v.Every == nil {
			return ""
		}
		return "every " + time.Duration(*v.Every).String()
	}
	tz := v.Timezone
	if tz == "" {
		tz = "UTC"
	}
	return v.Cron + " (" + tz + ")"
}

// scheduleJobType is the type of a schedule's job.
func scheduleJobType(job json.RawMessage) string {
	var j struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(job, &j)
	return j.Type
}
