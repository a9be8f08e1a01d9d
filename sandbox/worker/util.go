package worker

import (
	"time"
)

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
