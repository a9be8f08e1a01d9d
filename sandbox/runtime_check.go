package sandbox

// CheckRuntime reports whether the pinned React runtime is present in
// cfg.RuntimeDir or the cache and verifies against its pinned integrity,
// without fetching anything (`roomrelay doctor`).
func CheckRuntime(cfg Config) error {
	_, err := loadRuntime(cfg)
	return err
}
