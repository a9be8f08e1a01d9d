package sandbox

// CheckRuntime reports whether the pinned React runtime is present in
// cfg.RuntimeDir or the cache and verifies against its pinned integrity,
// without fetching anything (`roomrelay doctor`).
func CheckRuntime(cfg Config) error {
	_, err := loadRuntime(cfg)
	return err
}

// LoadRuntime returns the verified runtime sources by module id, what a
// Pool sends a worker in its init message (WorkerInit.Libraries); nothing is
// fetched. It lets the worker side's tests run snippets in process.
func LoadRuntime(cfg Config) (map[string]string, error) {
	return loadRuntime(cfg)
}
