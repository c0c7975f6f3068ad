"""The accuracy predictor: collecting measured subnets, fitting and loading the model."""
