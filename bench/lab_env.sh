# Source me: the lab's logins and TLS for the kairos commands run by hand on the lab
# (as tests/demo.sh and the integration tests set them; docs/security.md).
#   . bench/lab_env.sh && kairos calibrate --engine redis ...
# Kairos' own logins read the running values and drive the executor; the loads log in as the
# lab's application user, which owns the data (Kairos' role and ACL user may not touch it).
_kairos_lab=${KAIROS_LAB_DIR:-$PWD/.lab}
export KAIROS_CASSANDRA_USERNAME=kairos KAIROS_REDIS_USERNAME=kairos
KAIROS_CASSANDRA_PASSWORD="$(cat "$_kairos_lab/secrets/cassandra-cql-password")"
KAIROS_REDIS_PASSWORD="$(cat "$_kairos_lab/secrets/redis-kairos-password")"
export KAIROS_CASSANDRA_PASSWORD KAIROS_REDIS_PASSWORD
export KAIROS_LOAD_CASSANDRA_USERNAME=app KAIROS_LOAD_REDIS_USERNAME=app
KAIROS_LOAD_CASSANDRA_PASSWORD="$(cat "$_kairos_lab/secrets/cassandra-app-password")"
KAIROS_LOAD_REDIS_PASSWORD="$(cat "$_kairos_lab/secrets/redis-app-password")"
export KAIROS_LOAD_CASSANDRA_PASSWORD KAIROS_LOAD_REDIS_PASSWORD
for _engine in CASSANDRA REDIS; do
  export "KAIROS_${_engine}_TLS_CA=$_kairos_lab/tls/ca.pem"
  export "KAIROS_${_engine}_TLS_CERT=$_kairos_lab/tls/kairos.pem"
  export "KAIROS_${_engine}_TLS_KEY=$_kairos_lab/tls/kairos.key"
done
unset _engine _kairos_lab
