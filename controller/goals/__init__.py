"""What users asked for: validation, and the deployment and application tables
with their fenced writes."""
