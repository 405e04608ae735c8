"""What operators call: the admin routes, health, metrics and SageMaker's entry points."""
