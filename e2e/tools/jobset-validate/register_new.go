//go:build !jobset_setup

package main

import (
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/jobset/pkg/webhooks"
)

// registerJobSetWebhooks: before JobSet v0.12 the JobSet webhook is built and registered on its own.
func registerJobSetWebhooks(mgr ctrl.Manager) error {
	hook, err := webhooks.NewJobSetWebhook(mgr.GetClient())
	if err != nil {
		return err
	}
	return hook.SetupWebhookWithManager(mgr)
}
