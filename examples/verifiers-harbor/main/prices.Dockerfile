# The `prices` service: the shop's price list, served read-only over HTTP on port 8080 by
# Python's http.server (Python 3 from the same offline .deb files as main).
FROM debian:bookworm-slim
COPY offline/debs/ /tmp/debs/
RUN apt-get install -y -qq --no-install-recommends /tmp/debs/*.deb >/dev/null && rm -rf /tmp/debs
COPY prices.json /srv/prices/prices.json
USER nobody
EXPOSE 8080
CMD ["python3", "-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", "/srv/prices"]
