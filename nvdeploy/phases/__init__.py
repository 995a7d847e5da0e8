"""Phase runners (install, validate, optimize) driven by inventories and playbooks."""
