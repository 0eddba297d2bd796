"""What every layer of mfargo builds on and which imports nothing else of it: what the target
platforms accept (Kubernetes' syntax rules, Argo's cron, the schemas and the validation
backstop), the versions mfargo targets, and the one-line user error."""
