"""farm.yaml and jobs/ in, validated and frozen: the farm's configuration."""
