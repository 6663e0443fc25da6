package mgmt

import "errors"

// Restore fills dataDir (a fresh station directory) from a backup file
// made by RouteBackup. Placeholder so `corral mgmt restore` builds before
// the station's backup.go lands: delete this file when it does.
func Restore(file, dataDir string) error {
	return errors.New("mgmt: restore not built yet")
}
