//go:build jobset_setup

package main

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/jobset/pkg/webhooks"
)

// registerJobSetWebhooks: JobSet v0.12 and later register every webhook through Setup.
func registerJobSetWebhooks(mgr ctrl.Manager) error {
	return webhooks.Setup(mgr)
}
