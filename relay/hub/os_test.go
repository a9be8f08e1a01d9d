package hub

import "os"

var osStat = os.Stat
