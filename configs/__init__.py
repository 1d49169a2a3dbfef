"""engram's configuration files, installed as the package data ``engram.configs`` (`experiments.config_files`)."""
