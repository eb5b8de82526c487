package cluster

import "strconv"

// Lag returns how many committed entries this replica has not applied
// yet, or -1 when Raft does not say.
func (g *Group) Lag() int64 {
	st := g.raft.Stats()
	commit, err1 := strconv.ParseUint(st["commit_index"], 10, 64)
	applied, err2 := strconv.ParseUint(st["applied_index"], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	if applied >= commit {
		return 0
	}
	return int64(commit - applied)
}
