"""The trainer's environment: virtual environments, container images, Apptainer definitions, the runtime interface."""
