#!/bin/bash
mkdir -p /app/site && echo "<h1>hi</h1>" > /app/site/index.html
