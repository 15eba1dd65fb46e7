package provider

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var roles = []string{"tenant-admin", "developer", "viewer"}

func newServiceAccountResource() resource.Resource { return &serviceAccountResource{} }

type serviceAccountResource struct{ base }

type serviceAccountModel struct {
	ID           types.String `tfsdk:"id"`
	Tenant       types.String `tfsdk:"tenant"`
	Name         types.String `tfsdk:"name"`
	Role         types.String `tfsdk:"role"`
	Description  types.String `tfsdk:"description"`
	ClientID     types.String `tfsdk:"client_id"`
	ClientSecret types.String `tfsdk:"client_secret"`
	Status       types.String `tfsdk:"status"`
}

type serviceAccountJSON struct {
	ID           int64  `json:"id"`
	Tenant       string `json:"tenant"`
	Name         string `json:"name"`
	Role         string `json:"role"`
	Description  string `json:"description"`
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret"`
	Status       string `json:"status"`
}

func (r *serviceAccountResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_service_account"
}

func (r *serviceAccountResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A tenant's machine identity: an OAuth client `<tenant>--<name>` with the client-credentials grant " +
			"and a role in the tenant. Its secret is shown by the API once, at creation: the provider keeps it in the state " +
			"(sensitive), so treat the state as a secret. Changing `tenant` or `name` replaces the account (and its secret).",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The account's numeric id."},
			"tenant": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepReplString,
				Description: "The tenant's slug; default: the caller's only tenant."},
			"name": schema.StringAttribute{Required: true, PlanModifiers: replaceString,
				Description: "3-32 lowercase letters, digits and single hyphens; the client id is `<tenant>--<name>`."},
			"role": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Validators:  []validator.String{stringvalidator.OneOf(roles...)},
				Description: "`tenant-admin`, `developer` (default) or `viewer`."},
			"description": schema.StringAttribute{Optional: true, Computed: true, PlanModifiers: keepString,
				Description: "Free text, at most 500 characters."},
			"client_id": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "`<tenant>--<name>`: the OAuth client id (and the principal of topic ACLs)."},
			"client_secret": schema.StringAttribute{Computed: true, Sensitive: true, PlanModifiers: keepString,
				Description: "The secret, set once at creation (null for an imported account: the API never shows it again)."},
			"status": schema.StringAttribute{Computed: true, PlanModifiers: keepString,
				Description: "The account's provisioning status."},
		},
	}
}

func (r *serviceAccountResource) attrs() map[string]bool {
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	return attrNames(resp.Schema)
}

func serviceAccountState(a serviceAccountJSON, secret types.String) serviceAccountModel {
	return serviceAccountModel{
		ID:           types.StringValue(strconv.FormatInt(a.ID, 10)),
		Tenant:       types.StringValue(a.Tenant),
		Name:         types.StringValue(a.Name),
		Role:         types.StringValue(a.Role),
		Description:  types.StringValue(a.Description),
		ClientID:     types.StringValue(a.ClientID),
		ClientSecret: secret,
		Status:       types.StringValue(a.Status),
	}
}

func (r *serviceAccountResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan serviceAccountModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	b := body{}
	b.str("tenant", plan.Tenant)
	b.str("name", plan.Name)
	b.str("role", plan.Role)
	b.str("description", plan.Description)
	var created serviceAccountJSON
	if err := r.client.Post(ctx, "service-accounts", b, &created); err != nil {
		addAPIError(&resp.Diagnostics, "Could not create the service account", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, serviceAccountState(created, types.StringValue(created.ClientSecret)))...)
}

func (r *serviceAccountResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state serviceAccountModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	var account serviceAccountJSON
	err := r.client.Get(ctx, "service-accounts/"+escape(state.ID.ValueString()), nil, &account)
	gone, err := r.client.Gone(ctx, err, state.Tenant.ValueString())
	if gone {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not read the service account", err, r.attrs())
		return
	}
	secret := state.ClientSecret
	if secret.IsUnknown() {
		secret = types.StringNull()
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, serviceAccountState(account, secret))...)
}

func (r *serviceAccountResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state serviceAccountModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	c := changes{body{}}
	c.str("role", plan.Role, state.Role)
	c.str("description", plan.Description, state.Description)
	var account serviceAccountJSON
	if err := r.client.Patch(ctx, "service-accounts/"+escape(state.ID.ValueString()), nil, c.body, &account); err != nil {
		addAPIError(&resp.Diagnostics, "Could not change the service account", err, r.attrs())
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, serviceAccountState(account, state.ClientSecret))...)
}

func (r *serviceAccountResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state serviceAccountModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	_, err := r.client.Gone(ctx, r.client.Delete(ctx, "service-accounts/"+escape(state.ID.ValueString()), nil), state.Tenant.ValueString())
	if err != nil {
		addAPIError(&resp.Diagnostics, "Could not delete the service account", err, r.attrs())
	}
}

// ImportState takes the numeric id or the client id `<tenant>--<name>`.
func (r *serviceAccountResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	id := req.ID
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		tenant, name, found := strings.Cut(id, "--")
		if !found || tenant == "" || name == "" {
			resp.Diagnostics.AddError("Invalid import id",
				fmt.Sprintf("expected the account's numeric id or its client id <tenant>--<name>, got %q", id))
			return
		}
		accounts, err := List[serviceAccountJSON](ctx, r.client, "service-accounts",
			url.Values{"tenant": {tenant}, "name": {name}})
		if err != nil {
			addAPIError(&resp.Diagnostics, "Could not look the service account up", err, nil)
			return
		}
		id = ""
		for _, account := range accounts {
			if account.ClientID == req.ID {
				id = strconv.FormatInt(account.ID, 10)
			}
		}
		if id == "" {
			resp.Diagnostics.AddError("No such service account", fmt.Sprintf("no service account %q is visible to these credentials", req.ID))
			return
		}
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), id)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("client_secret"), types.StringNull())...)
}
