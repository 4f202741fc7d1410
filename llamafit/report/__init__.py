"""The English and the JSON: text and --json for inspect, check, plan, gpus and ls."""
