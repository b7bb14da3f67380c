"""The edge: app factory, routes, validation, problem responses, the Lambda handler."""
