"""autoscale"""
