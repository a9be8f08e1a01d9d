package ownerfile

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

const describe = "owner-only ACL"

// Fix says what to do about a refused file.
func Fix(path string) string {
	return `remove the other entries: icacls "` + path + `" /inheritance:r /grant:r "%USERNAME%:F"`
}

// trusted are the SIDs that may hold access besides the current user and
// the file's owner: SYSTEM and the Administrators group can take any file
// anyway (as root can on Unix), and a service running as LocalSystem must
// read what an administrator enrolled for it.
func trusted() ([]*windows.SID, error) {
	user, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	sys, err := windows.CreateWellKnownSid(windows.WinLocalSystemSid)
	if err != nil {
		return nil, err
	}
	admins, err := windows.CreateWellKnownSid(windows.WinBuiltinAdministratorsSid)
	if err != nil {
		return nil, err
	}
	return []*windows.SID{user.User.Sid, sys, admins}, nil
}

// Protect makes sure only the current user, SYSTEM and Administrators can
// read the open file: when its DACL lets anyone else read it (a file under
// C:\ inherits Users' read), the DACL is replaced by a protected one that
// grants those three full access and inherits nothing. A DACL that already
// passes Check (a file in the user's own profile inherits exactly those
// three) is left as it is.
func Protect(f *os.File) error {
	var shared *SharedError
	if err := Check(f.Name()); err == nil {
		return nil
	} else if !errors.As(err, &shared) {
		return fmt.Errorf("protect %s: %w", f.Name(), err)
	}
	sids, err := trusted()
	if err != nil {
		return fmt.Errorf("protect %s: %w", f.Name(), err)
	}
	var entries []windows.EXPLICIT_ACCESS
	for _, s := range sids {
		entries = append(entries, windows.EXPLICIT_ACCESS{
			AccessPermissions: fileAllAccess,
			AccessMode:        windows.SET_ACCESS,
			Inheritance:       windows.NO_INHERITANCE,
			Trustee:           windows.TRUSTEE{TrusteeForm: windows.TRUSTEE_IS_SID, TrusteeValue: windows.TrusteeValueFromSID(s)},
		})
	}
	acl, err := windows.ACLFromEntries(entries, nil)
	if err != nil {
		return fmt.Errorf("protect %s: build ACL: %w", f.Name(), err)
	}
	// By name: Go's handle was opened without WRITE_DAC.
	err = windows.SetNamedSecurityInfo(f.Name(), windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, acl, nil)
	if err != nil {
		return fmt.Errorf("protect %s: set ACL: %w", f.Name(), err)
	}
	// A volume that keeps no ACLs (FAT, some shares; Wine, which maps a
	// file's security to its Unix mode and ignores a new DACL) accepts the
	// call and changes nothing: read it back rather than trust it.
	if err := Check(f.Name()); errors.As(err, &shared) {
		return fmt.Errorf("protect %s: the owner-only ACL did not hold (%s can still read it): this volume keeps no file ACLs; use a folder on an NTFS drive", f.Name(), shared.Who)
	} else if err != nil {
		return fmt.Errorf("protect %s: %w", f.Name(), err)
	}
	return nil
}

// readRights are the rights that let a holder read the file's content.
const readRights = windows.FILE_READ_DATA | windows.GENERIC_READ | windows.GENERIC_ALL | windows.MAXIMUM_ALLOWED

// Check returns a *SharedError if an allow entry of the file's DACL lets
// anyone but the current user, the owner, SYSTEM or Administrators read it,
// if it has no DACL (everyone may), or if an entry is of a kind this check
// does not read (refused rather than guessed at).
func Check(path string) error {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("check %s: read ACL: %w", path, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil || dacl == nil {
		return &SharedError{Path: path, Who: "no DACL: everyone"}
	}
	ok, err := trusted()
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if owner, _, err := sd.Owner(); err == nil && owner != nil {
		ok = append(ok, owner)
	}
	for i := range uint32(dacl.AceCount) {
		var ace *windows.ACCESS_ALLOWED_ACE
		if err := windows.GetAce(dacl, i, &ace); err != nil {
			return fmt.Errorf("check %s: read ACE %d: %w", path, i, err)
		}
		switch ace.Header.AceType {
		case windows.ACCESS_DENIED_ACE_TYPE:
			continue
		case windows.ACCESS_ALLOWED_ACE_TYPE:
		default:
			return &SharedError{Path: path, Who: fmt.Sprintf("an ACE of type %d", ace.Header.AceType)}
		}
		if ace.Mask&readRights == 0 {
			continue
		}
		sid := (*windows.SID)(unsafe.Pointer(&ace.SidStart))
		if !anyEqual(ok, sid) {
			return &SharedError{Path: path, Who: account(sid)}
		}
	}
	return nil
}

func anyEqual(sids []*windows.SID, s *windows.SID) bool {
	for _, x := range sids {
		if x.Equals(s) {
			return true
		}
	}
	return false
}

// account names a SID as DOMAIN\name (SID), or the SID alone.
func account(s *windows.SID) string {
	if name, domain, _, err := s.LookupAccount(""); err == nil {
		if domain != "" {
			name = domain + `\` + name
		}
		return name + " (" + s.String() + ")"
	}
	return s.String()
}

// fileAllAccess is FILE_ALL_ACCESS: every specific and standard file right,
// not GENERIC_ALL, which is stored unmapped in an explicit entry.
const fileAllAccess = windows.STANDARD_RIGHTS_REQUIRED | windows.SYNCHRONIZE | 0x1FF
