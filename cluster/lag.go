package cluster

// Lag returns how many committed entries this replica has not applied
// yet.
func (g *Group) Lag() int64 {
	commit, applied := g.raft.CommitIndex(), g.raft.AppliedIndex()
	if applied >= commit {
		return 0
	}
	return int64(commit - applied)
}
