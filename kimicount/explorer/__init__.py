"""The anatomy explorer: the component tree read as pages (`kimicount show`, `kimicount explore`)."""
