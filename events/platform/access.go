package platform

import "io/fs"

// Access is who owns a file and what others may do with it.
type Access struct {
	// Perm is the file's permission bits as Unix has them. On Windows the
	// owner's bits are those of a private file (0o600, or 0o700 for a
	// directory), and the group and other bits both hold what the DACL
	// grants anyone else (see the package doc).
	Perm fs.FileMode
	// Owned: the file belongs to this user.
	Owned bool
	// Owner and Me name the file's owner and this user for messages:
	// "uid 1000" on Unix, a SID on Windows.
	Owner, Me string
}

// Well-known SIDs that a private file may grant access to on Windows.
const (
	SIDSystem       = "S-1-5-18"
	SIDAdmins       = "S-1-5-32-544"
	SIDCreatorOwner = "S-1-3-0"
	SIDOwnerRights  = "S-1-3-4"
	// For tests and messages: SIDs a private file must not grant to.
	SIDEveryone           = "S-1-1-0"
	SIDUsers              = "S-1-5-32-545"
	SIDAuthenticatedUsers = "S-1-5-11"
)

// ACE is one entry of a Windows DACL, as [JudgeDACL] reads it.
type ACE struct {
	Type  uint8  // the ACE header's AceType
	Flags uint8  // the ACE header's AceFlags (inheritance)
	Mask  uint32 // the access mask
	SID   string // the trustee, "" when it could not be read
}

// ACE types (winnt.h).
const (
	aceAllowed               = 0x0
	aceDenied                = 0x1
	aceAllowedObject         = 0x5
	aceDeniedObject          = 0x6
	aceAllowedCallback       = 0x9
	aceDeniedCallback        = 0xa
	aceAllowedCallbackObject = 0xb
	aceDeniedCallbackObject  = 0xc
)

// Access mask bits (winnt.h): the ones that say nothing of a file's
// content, and the ones that only read or only execute it. Every other
// bit counts as writing.
const (
	maskHarmless = 0x00020000 | 0x00100000 | 0x00000080 // READ_CONTROL, SYNCHRONIZE, FILE_READ_ATTRIBUTES
	maskRead     = 0x00000001 | 0x00000008 | 0x80000000 // FILE_READ_DATA (list), FILE_READ_EA, GENERIC_READ
	maskExecute  = 0x00000020 | 0x20000000              // FILE_EXECUTE (traverse), GENERIC_EXECUTE
	maskAll      = 0x10000000                           // GENERIC_ALL
)

// JudgeDACL decides, from a file's owner, this user and the file's DACL
// (nil with present false: the file has none), whether the file is this
// user's and what everyone else may do with it, as [Access] says.
func JudgeDACL(dir bool, owner, me string, dacl []ACE, present bool) Access {
	a := Access{Owner: owner, Me: me, Perm: 0o600}
	if dir {
		a.Perm = 0o700
	}
	a.Owned = owner != "" && (owner == me || owner == SIDSystem || owner == SIDAdmins)
	if !a.Owned {
		// An owner may rewrite the DACL whatever it says: a file owned by
		// someone else is open to them.
		a = a.others(0o7)
	}
	if !present {
		return a.others(0o7)
	}
	trusted := map[string]bool{me: true, SIDSystem: true, SIDAdmins: true, SIDCreatorOwner: true, SIDOwnerRights: true}
	if a.Owned {
		trusted[owner] = true
	}
	for _, e := range dacl {
		switch e.Type {
		case aceDenied, aceDeniedObject, aceDeniedCallback, aceDeniedCallbackObject:
			continue // denying only takes away
		case aceAllowed, aceAllowedObject, aceAllowedCallback, aceAllowedCallbackObject:
			if e.SID != "" && me != "" && trusted[e.SID] {
				continue
			}
			// Inherit-only entries count too: what a directory passes on
			// is what the files made in it get.
			a = a.others(maskBits(e.Mask))
		default:
			a = a.others(0o7)
		}
	}
	return a
}

// others adds rwx (0-7) to the group and other bits.
func (a Access) others(rwx fs.FileMode) Access {
	a.Perm |= rwx<<3 | rwx
	return a
}

// maskBits is the Unix rwx (0-7) that an access mask grants.
func maskBits(m uint32) fs.FileMode {
	var b fs.FileMode
	if m&(maskRead|maskAll) != 0 {
		b |= 0o4
	}
	if m&^(maskHarmless|maskRead|maskExecute) != 0 {
		b |= 0o2 // includes GENERIC_ALL and every bit not named
	}
	if m&(maskExecute|maskAll) != 0 {
		b |= 0o1
	}
	return b
}
